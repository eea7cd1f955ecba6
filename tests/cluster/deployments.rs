//! Deployment status on a real 3-node cluster (EMCO's status query, seeds 001 and 004):
//! concurrent reporters on every node, each status read made right after an acknowledged report
//! (on another node) reflects it, the mirror object is watchable, the CLI prints the exact JSON,
//! and the summary at 10,000 resources stays exact while reports stream in (its latency is
//! printed, for the README, not asserted).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward::client::{Client, Consistency, DeploymentVerb, EventType};
use steward::proto::v1 as pb;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::harness::*;

const KIND: &str = "DeploymentIntentGroup";

fn client(cluster: &TestCluster, id: u64) -> Client {
    Client::connect(&[cluster.endpoint(id)]).expect("client")
}

fn gvk(group: &str, kind: &str) -> Option<pb::Gvk> {
    Some(pb::Gvk {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
    })
}

fn app_name(a: usize) -> String {
    format!("app{a}")
}

fn cluster_name(c: usize) -> String {
    format!("edge{c}")
}

fn res_name(a: usize, c: usize, r: usize) -> String {
    format!("a{a}-c{c}-r{r}")
}

/// Creates `name` with apps x clusters x per Deployments, approved and instantiated.
async fn instantiated(api: &Client, name: &str, apps: usize, clusters: usize, per: usize) {
    api.deployment_create(pb::CreateDeploymentRequest {
        namespace: String::new(),
        name: name.into(),
        project: "p1".into(),
        composite_app: "edge-app".into(),
        composite_app_version: "v1".into(),
        composite_profile: "prof".into(),
        labels: Default::default(),
    })
    .await
    .expect("create");
    let mut all = Vec::new();
    for a in 0..apps {
        for c in 0..clusters {
            for r in 0..per {
                all.push(pb::DeploymentAppResource {
                    app: app_name(a),
                    cluster: cluster_name(c),
                    gvk: gvk("apps", "Deployment"),
                    name: res_name(a, c, r),
                    metadata_json: json!({"name": res_name(a, c, r)}).to_string(),
                    spec_json: json!({"replicas": 1}).to_string(),
                });
            }
        }
    }
    for chunk in all.chunks(1_000) {
        api.deployment_add_resources(pb::AddDeploymentResourcesRequest {
            namespace: String::new(),
            name: name.into(),
            resources: chunk.to_vec(),
        })
        .await
        .expect("add resources");
    }
    for verb in [DeploymentVerb::Approve, DeploymentVerb::Instantiate] {
        api.deployment_act("", name, verb).await.expect("act");
    }
}

/// rsync applied every resource of (app, cluster).
fn applied(name: &str, a: usize, c: usize) -> pb::RsyncReportRequest {
    pb::RsyncReportRequest {
        namespace: String::new(),
        name: name.into(),
        updates: vec![pb::RsyncUpdate {
            app: app_name(a),
            cluster: cluster_name(c),
            gvk: None,
            resource_name: String::new(),
            status: "Applied".into(),
        }],
    }
}

/// The monitor of cluster c sees every Deployment of app a (ready when `ready`) and one Pod each.
fn bundle(name: &str, a: usize, c: usize, per: usize, ready: bool) -> pb::ClusterReportRequest {
    let mut resources = Vec::new();
    for r in 0..per {
        let n = res_name(a, c, r);
        resources.push(pb::ClusterResource {
            gvk: gvk("apps", "Deployment"),
            name: n.clone(),
            metadata_json: json!({"name": n, "generation": 1}).to_string(),
            spec_json: json!({"replicas": 1}).to_string(),
            status_json: json!({"observedGeneration": 1, "replicas": 1,
                                "readyReplicas": u64::from(ready), "updatedReplicas": 1})
            .to_string(),
        });
        resources.push(pb::ClusterResource {
            gvk: gvk("", "Pod"),
            name: format!("{n}-pod"),
            metadata_json: json!({"name": format!("{n}-pod")}).to_string(),
            spec_json: String::new(),
            status_json: json!({"phase": "Running", "containerStatuses": [{"ready": ready}]})
                .to_string(),
        });
    }
    pb::ClusterReportRequest {
        namespace: String::new(),
        name: name.into(),
        bundles: vec![pb::ResourceBundle {
            app: app_name(a),
            cluster: cluster_name(c),
            kinds: vec!["Deployment".into(), "Pod".into()],
            resources,
            partial: false,
        }],
    }
}

fn query(
    name: &str,
    output: &str,
    apps: &[String],
    clusters: &[String],
) -> pb::DeploymentStatusRequest {
    pb::DeploymentStatusRequest {
        namespace: String::new(),
        name: name.into(),
        output: output.into(),
        apps: apps.to_vec(),
        clusters: clusters.to_vec(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reporters_and_reads_from_any_node_see_every_acknowledged_report() {
    const APPS: usize = 3;
    const CLUSTERS: usize = 4;
    const PER: usize = 5;
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let nodes = cluster.running();
    let api = client(&cluster, nodes[0]);
    let name = "edge";
    // A watch on the mirror objects sees every change of states and counts.
    let mut watch = api.watch(KIND, "", "", 0).await.expect("watch");
    instantiated(&api, name, APPS, CLUSTERS, PER).await;

    // One reporter per app, each writing through a different node and reading what it wrote
    // through the next one.
    let mut reporters = Vec::new();
    for a in 0..APPS {
        let writer = client(&cluster, nodes[a % nodes.len()]);
        let reader = client(&cluster, nodes[(a + 1) % nodes.len()]);
        reporters.push(tokio::spawn(async move {
            for c in 0..CLUSTERS {
                let f = ([app_name(a)], [cluster_name(c)]);
                writer
                    .deployment_report_rsync(applied(name, a, c))
                    .await
                    .expect("rsync");
                let s = reader
                    .deployment_status(
                        query(name, "summary", &f.0, &f.1),
                        Consistency::Linearizable,
                    )
                    .await
                    .expect("status");
                assert_eq!(
                    s.status["rsync-status"],
                    json!({"Applied": PER}),
                    "{}",
                    s.status
                );
                assert_eq!(s.status["cluster-status"], json!({"Unknown": PER}));
                writer
                    .deployment_report_cluster(bundle(name, a, c, PER, c % 2 == 0))
                    .await
                    .expect("cluster report");
                let s = reader
                    .deployment_status(
                        query(name, "summary", &f.0, &f.1),
                        Consistency::Linearizable,
                    )
                    .await
                    .expect("status");
                assert_eq!(
                    s.status["cluster-status"],
                    json!({"Present": 2 * PER}),
                    "{}",
                    s.status
                );
                let want = if c % 2 == 0 {
                    json!({"Ready": 2 * PER})
                } else {
                    json!({"Pending": 2 * PER})
                };
                assert_eq!(s.status["readiness"], want, "{}", s.status);
            }
        }));
    }
    for r in reporters {
        r.await.expect("reporter");
    }

    // Every node answers the same summary, linearizably; its revision is the store's.
    let total = APPS * CLUSTERS * PER;
    let ready = APPS * PER * CLUSTERS.div_ceil(2) * 2;
    let mut revisions = Vec::new();
    for id in &nodes {
        let s = client(&cluster, *id)
            .deployment_status(query(name, "summary", &[], &[]), Consistency::Linearizable)
            .await
            .expect("status");
        assert_eq!(s.status["state"], "Instantiated");
        assert_eq!(s.status["status"], "Instantiated", "{}", s.status);
        assert_eq!(s.status["rsync-status"], json!({"Applied": total}));
        assert_eq!(s.status["cluster-status"], json!({"Present": 2 * total}));
        assert_eq!(
            s.status["readiness"],
            json!({"Ready": ready, "Pending": 2 * total - ready})
        );
        revisions.push(s.revision);
    }
    assert!(
        revisions.iter().all(|r| *r == revisions[0]),
        "{revisions:?}"
    );

    // The watch saw the AppContext reach Instantiated, in revision order.
    let mut last = 0;
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(e)) = watch.next().await {
            assert!(e.revision > last);
            last = e.revision;
            let Some(object) = e.object else { continue };
            if e.event_type == EventType::Modified && object["status"]["status"] == "Instantiated" {
                return object;
            }
        }
        panic!("the watch ended");
    })
    .await
    .expect("the watch saw Instantiated");
    assert_eq!(seen["status"]["rsync-status"], json!({"Applied": total}));

    // Detail of one resource carries the cluster's raw status, whole.
    let one = pb::DeploymentStatusRequest {
        resources: vec![res_name(0, 1, 0)],
        kinds: vec!["Deployment".into()],
        ..query(name, "detail", &[app_name(0)], &[cluster_name(1)])
    };
    let s = api
        .deployment_status(one, Consistency::Serializable)
        .await
        .expect("detail");
    let r = &s.status["resources"][0]["clusters"][0]["resources"][0];
    assert_eq!(r["status"]["readyReplicas"], 0, "{}", s.status);
    assert_eq!(r["readiness"], "Pending");

    // Bad input: the right code, the field named, nothing changed.
    let bad = api
        .deployment_report_rsync(pb::RsyncReportRequest {
            updates: vec![pb::RsyncUpdate {
                status: "Done".into(),
                ..applied(name, 0, 0).updates[0].clone()
            }],
            ..applied(name, 0, 0)
        })
        .await
        .expect_err("bad status");
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("updates[0].status"), "{bad:?}");
    let missing = api
        .deployment_report_rsync(applied(name, 0, 99))
        .await
        .expect_err("no such cluster");
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    let early = api
        .deployment_act("", name, DeploymentVerb::Delete)
        .await
        .expect_err("delete while instantiated");
    assert_eq!(early.code(), Code::FailedPrecondition, "{early:?}");
    let direct = api
        .delete(KIND, "default", name, 0)
        .await
        .expect_err("the mirror is not written directly");
    assert_eq!(direct.code(), Code::InvalidArgument, "{direct:?}");

    // The CLI prints the server's JSON exactly, in the seed's key order.
    let endpoint = cluster.endpoint(nodes[2]);
    let text = steward_cli(
        &endpoint,
        None,
        &[
            "status", name, "--mode", "all", "--app", "app1", "-o", "json",
        ],
    )
    .await;
    let printed: Value = serde_json::from_str(&text).expect("JSON");
    let served = api
        .deployment_status(
            query(name, "all", &[app_name(1)], &[]),
            Consistency::Linearizable,
        )
        .await
        .expect("status");
    assert_eq!(printed, served.status);
    assert!(
        text.find("\"project\"") < text.find("\"rsync-status\""),
        "{text}"
    );
}

/// The summary at 10,000 resources (10 apps x 10 clusters x 100), read on the leader and on a
/// follower while a reporter streams cluster reports of 100 resources each, back to back: every
/// read counts every resource. It asserts no latency (a debug build beside the rest of the
/// suite on two cores says nothing about it); it prints p50/p90/p99 of the reads and of one
/// report, and the README's figures come from `cargo test --release --test cluster
/// status_summary_at_10000 -- --nocapture --test-threads 1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_summary_at_10000_resources_counts_every_one_while_reports_stream() {
    // A debug build runs a tenth of it, with paced reports, beside the rest of the suite on CI's
    // two cores.
    const DEBUG: bool = cfg!(debug_assertions);
    const APPS: usize = 10;
    const CLUSTERS: usize = if DEBUG { 2 } else { 10 };
    const PER: usize = if DEBUG { 50 } else { 100 };
    const PACE: Duration = Duration::from_millis(if DEBUG { 20 } else { 0 });
    const READS: usize = if DEBUG { 100 } else { 1_000 };
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let follower = *cluster
        .running()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let api = client(&cluster, leader);
    let name = "big";
    instantiated(&api, name, APPS, CLUSTERS, PER).await;
    for a in 0..APPS {
        for c in 0..CLUSTERS {
            api.deployment_report_rsync(applied(name, a, c))
                .await
                .expect("rsync");
        }
    }
    // Reports stream in from another task until the reads are done.
    let reporter = client(&cluster, follower);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_flag = stop.clone();
    let streamer = tokio::spawn(async move {
        let mut costs = Vec::new();
        let mut i = 0usize;
        while !stop_flag.load(std::sync::atomic::Ordering::Relaxed) {
            let (a, c) = (i % APPS, (i / APPS) % CLUSTERS);
            // 50 Deployments and their 50 Pods: 100 resources per report (50 in a debug build).
            let report = bundle(name, a, c, PER / 2, i % 3 != 0);
            let t = Instant::now();
            reporter
                .deployment_report_cluster(report)
                .await
                .expect("report");
            costs.push(t.elapsed());
            i += 1;
            tokio::time::sleep(PACE).await;
        }
        costs
    });
    // Linearizable summaries through the leader, then through a follower (which asks the
    // leader for a read index and waits to apply up to it), then serializable ones on the
    // follower (the summary's own cost, no barrier).
    let mut lat = Vec::new();
    let lin = Consistency::Linearizable;
    let local = Consistency::Serializable;
    for (role, id, consistency) in [
        ("leader, linearizable", leader, lin),
        ("follower, linearizable", follower, lin),
        ("follower, serializable", follower, local),
    ] {
        let reader = client(&cluster, id);
        let mut l = Vec::with_capacity(READS);
        for _ in 0..READS {
            let t = Instant::now();
            let s = reader
                .deployment_status(query(name, "summary", &[], &[]), consistency)
                .await
                .expect("summary");
            l.push(t.elapsed());
            assert_eq!(
                s.status["rsync-status"],
                json!({"Applied": APPS * CLUSTERS * PER})
            );
        }
        l.sort();
        lat.push((role, l));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut costs = streamer.await.expect("streamer");
    costs.sort();
    let pct = |v: &[Duration], p: usize| v[(v.len() * p / 100).min(v.len() - 1)];
    for (role, l) in &lat {
        println!(
            "summary at {} resources, {READS} reads ({role}) while reports of 100 resources \
             stream in: p50 {:?} p90 {:?} p99 {:?}",
            APPS * CLUSTERS * PER,
            pct(l, 50),
            pct(l, 90),
            pct(l, 99),
        );
    }
    println!(
        "{} reports of 100 resources (50 Deployments, 50 Pods) meanwhile, each acknowledged in: \
         p50 {:?} p90 {:?} p99 {:?}",
        costs.len(),
        pct(&costs, 50),
        pct(&costs, 90),
        pct(&costs, 99),
    );
    assert!(!costs.is_empty(), "reports streamed during the reads");
}

/// The README's walkthrough: the files in examples/emco through the CLI, as a user runs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readme_walkthrough_with_examples_emco_gives_the_shown_status() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let endpoint = cluster.endpoint(cluster.running()[1]);
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/emco");
    let run = |args: Vec<&'static str>| {
        let endpoint = endpoint.clone();
        async move { steward_cli(&endpoint, Some(dir), &args).await }
    };
    run(vec![
        "deployment",
        "create",
        "vfw-dig",
        "--project",
        "p1",
        "--composite-app",
        "vfw",
        "--composite-app-version",
        "v1",
        "--composite-profile",
        "default",
    ])
    .await;
    run(vec![
        "deployment",
        "add-resources",
        "vfw-dig",
        "-f",
        "resources.yaml",
    ])
    .await;
    run(vec!["deployment", "approve", "vfw-dig"]).await;
    let out = run(vec!["deployment", "instantiate", "vfw-dig"]).await;
    assert_eq!(
        out,
        "deployment default/vfw-dig: Instantiated Instantiating\n"
    );
    run(vec![
        "deployment",
        "report-rsync",
        "vfw-dig",
        "-f",
        "rsync.yaml",
    ])
    .await;
    run(vec![
        "deployment",
        "report-cluster",
        "vfw-dig",
        "-f",
        "bundles.yaml",
    ])
    .await;
    let table = run(vec!["status", "vfw-dig"]).await;
    assert!(
        table.contains("Applied=3 Retrying=1")
            && table.contains("Present=3 Unknown=2")
            && table.contains("Ready=3 Unknown=2"),
        "{table}"
    );
    let rsync: Value = serde_json::from_str(
        &run(vec![
            "status",
            "vfw-dig",
            "--mode",
            "rsync",
            "--cluster",
            "edge2",
            "-o",
            "json",
        ])
        .await,
    )
    .expect("json");
    assert_eq!(rsync["rsync-status"], json!({"Retrying": 1}));
    assert_eq!(
        rsync["resources"][0]["clusters"][0]["resources"][0],
        json!({"GVK": {"Group": "apps", "Version": "v1", "Kind": "Deployment"}, "Name": "collectd",
               "metadata": {"name": "collectd"}, "spec": {"replicas": 1}, "rsync-status": "Retrying"})
    );
    // Deployments counted by AppContext state, with the generic count.
    let count: Value = serde_json::from_str(
        &run(vec![
            "count",
            "DeploymentIntentGroup",
            "-A",
            "--by",
            "status:status",
            "-o",
            "json",
        ])
        .await,
    )
    .expect("json");
    assert_eq!(count["counts"], json!({"Instantiating": 1}), "{count}");
    let out = run(vec!["deployment", "terminate", "vfw-dig"]).await;
    assert_eq!(out, "deployment default/vfw-dig: Terminated PreTerminate\n");
    run(vec![
        "deployment",
        "report-context",
        "vfw-dig",
        "Terminating",
    ])
    .await;
    let out = run(vec![
        "deployment",
        "report-rsync",
        "vfw-dig",
        "-f",
        "terminated.yaml",
    ])
    .await;
    assert_eq!(out, "deployment default/vfw-dig: Terminated Terminated\n");
    run(vec!["deployment", "delete", "vfw-dig"]).await;
}

/// kill -9 of the leader while reporters write through every node: every acknowledged report is
/// in the status the new leader answers; a follower that was down while snapshots were taken and
/// the log purged catches up from a snapshot and answers the same status, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_reports_survive_a_leader_kill_and_a_snapshot_install() {
    const APPS: usize = 4;
    const CLUSTERS: usize = 6;
    const PER: usize = 3;
    let mut cluster = TestCluster::start_with(3, test_raft(20, 5), Default::default()).await;
    let leader = cluster.wait_leader().await;
    let api = client(&cluster, leader);
    let name = "ha";
    instantiated(&api, name, APPS, CLUSTERS, PER).await;
    let endpoints: Vec<String> = cluster
        .running()
        .iter()
        .map(|id| cluster.endpoint(*id))
        .collect();
    // One reporter per app, through every node (clients fail over to the next endpoint); each
    // records the clusters whose rsync report was acknowledged.
    let mut reporters = Vec::new();
    for a in 0..APPS {
        let mut eps = endpoints.clone();
        let n = eps.len();
        eps.rotate_left(a % n);
        let c = Client::connect(&eps).expect("client");
        reporters.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for cl in 0..CLUSTERS {
                // Retried until acknowledged: an ambiguous failure may or may not have applied,
                // and applying the same report twice is harmless.
                for _ in 0..50 {
                    if c.deployment_report_rsync(applied(name, a, cl))
                        .await
                        .is_ok()
                    {
                        acked.push(cl);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    cluster.kill(leader);
    let survivors = cluster.running();
    let new_leader = cluster.wait_leader_among(&survivors).await;
    let mut acked = Vec::new();
    for (a, r) in reporters.into_iter().enumerate() {
        acked.push((a, r.await.expect("reporter")));
    }
    let reader = client(&cluster, new_leader);
    for (a, clusters) in &acked {
        assert_eq!(
            clusters.len(),
            CLUSTERS,
            "app {a}: every report acknowledged in the end"
        );
        for cl in clusters {
            let s = reader
                .deployment_status(
                    query(name, "summary", &[app_name(*a)], &[cluster_name(*cl)]),
                    Consistency::Linearizable,
                )
                .await
                .expect("status");
            assert_eq!(
                s.status["rsync-status"],
                json!({"Applied": PER}),
                "app {a} cluster {cl}"
            );
        }
    }
    let whole = reader
        .deployment_status(query(name, "summary", &[], &[]), Consistency::Linearizable)
        .await
        .expect("status");
    assert_eq!(whole.status["status"], "Instantiated", "{}", whole.status);

    // Cluster reports while the old leader is down push the log past several snapshots.
    for a in 0..APPS {
        for cl in 0..CLUSTERS {
            reader
                .deployment_report_cluster(bundle(name, a, cl, PER, (a + cl) % 2 == 0))
                .await
                .expect("cluster report");
        }
    }
    cluster.spawn(leader);
    let target = cluster.applied(new_leader).await.expect("applied");
    wait_for(
        "the restarted node to catch up",
        Duration::from_secs(30),
        || async { cluster.applied(leader).await.filter(|a| *a >= target) },
    )
    .await;
    let detail = |id: u64| {
        let c = client(&cluster, id);
        async move {
            c.deployment_status(query(name, "detail", &[], &[]), Consistency::Serializable)
                .await
                .expect("detail")
                .text
        }
    };
    assert_eq!(detail(leader).await, detail(new_leader).await);
}
