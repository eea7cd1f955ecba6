//! CRUD, conflicts, txn, selectors, pagination, follower reads and writes on a 3-node cluster.

use std::time::{Duration, Instant};

use steward::proto::v1::*;
use tonic::Code;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_conflicts_txn_selectors_pagination_followers() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let followers = cluster.followers().await;
    let mut c = cluster.res(leader).await;

    // Create, then AlreadyExists.
    let a = create(&mut c, director("a", &[("env", "prod"), ("tier", "web")]))
        .await
        .expect("create a");
    assert_eq!(a["metadata"]["namespace"], "default");
    assert_eq!(a["metadata"]["generation"], 1);
    assert!(!a["metadata"]["uid"].as_str().unwrap_or("").is_empty());
    let rv_a = rv(&a);
    let err = create(&mut c, director("a", &[]))
        .await
        .expect_err("duplicate");
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    // Writes through a follower land, and revisions increase store-wide.
    let mut f = cluster.res(followers[0]).await;
    let b = create(&mut f, director("b", &[("env", "dev")]))
        .await
        .expect("create via follower");
    assert!(rv(&b) > rv_a);
    // A linearizable read on the other follower sees it at once.
    let mut f2 = cluster.res(followers[1]).await;
    let got = get(&mut f2, "b", Consistency::Linearizable)
        .await
        .expect("linearizable get on follower");
    assert_eq!(got, b);

    // Update with a stale precondition is Aborted; with the right one it bumps generation.
    let mut changed = a.clone();
    changed["spec"]["options"] = "changed".into();
    let stale = c
        .update(UpdateRequest {
            object_json: changed.to_string(),
            expected_revision: rv_a + 1000,
            ..Default::default()
        })
        .await
        .expect_err("stale precondition");
    assert_eq!(stale.code(), Code::Aborted, "{stale:?}");
    let updated = parse(
        &c.update(UpdateRequest {
            object_json: changed.to_string(),
            expected_revision: rv_a,
            ..Default::default()
        })
        .await
        .expect("update")
        .into_inner()
        .object_json,
    );
    assert_eq!(updated["metadata"]["generation"], 2);
    assert!(rv(&updated) > rv(&b));

    // UpdateStatus changes status only: no generation bump.
    let mut with_status = updated.clone();
    with_status["status"] = serde_json::json!({"state": "succeeded"});
    let st = parse(
        &c.update_status(UpdateRequest {
            object_json: with_status.to_string(),
            expected_revision: 0,
            ..Default::default()
        })
        .await
        .expect("update status")
        .into_inner()
        .object_json,
    );
    assert_eq!(st["metadata"]["generation"], 2);
    assert_eq!(st["status"]["state"], "succeeded");
    assert_eq!(st["spec"]["options"], "changed");

    // Serializable read on a follower eventually sees the status (it may lag, so wait).
    let mut fr = cluster.res(followers[1]).await;
    wait_for(
        "follower serializable read to catch up",
        std::time::Duration::from_secs(10),
        || {
            let mut fr = fr.clone();
            async move {
                let o = get(&mut fr, "a", Consistency::Serializable).await.ok()?;
                (o["status"]["state"] == "succeeded").then_some(())
            }
        },
    )
    .await;
    let _ = &mut fr;

    // Txn: all or nothing.
    let txn_fail = c
        .txn(TxnRequest {
            ops: vec![
                TxnOp {
                    op: Some(txn_op::Op::Create(CreateRequest {
                        object_json: director("c", &[]),
                        ..Default::default()
                    })),
                },
                TxnOp {
                    op: Some(txn_op::Op::Delete(DeleteRequest {
                        kind: "Director".into(),
                        namespace: "default".into(),
                        name: "missing".into(),
                        expected_revision: 0,
                        ..Default::default()
                    })),
                },
            ],
            ..Default::default()
        })
        .await
        .expect_err("txn with a failing op");
    assert_eq!(txn_fail.code(), Code::NotFound, "{txn_fail:?}");
    assert!(txn_fail.message().contains("op 1"), "{txn_fail:?}");
    assert_eq!(
        get(&mut c, "c", Consistency::Linearizable)
            .await
            .expect_err("c absent")
            .code(),
        Code::NotFound
    );
    let ok = c
        .txn(TxnRequest {
            ops: vec![
                TxnOp {
                    op: Some(txn_op::Op::Create(CreateRequest {
                        object_json: director("c", &[("env", "prod")]),
                        ..Default::default()
                    })),
                },
                TxnOp {
                    op: Some(txn_op::Op::Delete(DeleteRequest {
                        kind: "Director".into(),
                        namespace: "default".into(),
                        name: "b".into(),
                        expected_revision: rv(&b),
                        ..Default::default()
                    })),
                },
            ],
            ..Default::default()
        })
        .await
        .expect("txn")
        .into_inner();
    assert_eq!(ok.objects_json.len(), 2);
    assert_eq!(
        get(&mut c, "b", Consistency::Linearizable)
            .await
            .expect_err("b deleted")
            .code(),
        Code::NotFound
    );

    // Selectors.
    for i in 0..25 {
        let env = if i % 2 == 0 { "prod" } else { "staging" };
        create(
            &mut c,
            director(&format!("p{i:02}"), &[("env", env), ("batch", "yes")]),
        )
        .await
        .expect("create batch");
    }
    let names = |items: &[serde_json::Value]| -> Vec<String> {
        items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let (prod, _) = list_all(&mut c, "env=prod", 0).await;
    assert_eq!(prod.len(), 13 + 2, "{:?}", names(&prod)); // p00..p24 even + a + c
    let (not_prod, _) = list_all(&mut c, "batch,env!=prod", 0).await;
    assert_eq!(not_prod.len(), 12);
    let (in_set, _) = list_all(&mut c, "env in (staging, dev),tier notin (web)", 0).await;
    assert_eq!(in_set.len(), 12);
    let (no_batch, _) = list_all(&mut c, "!batch", 0).await;
    assert_eq!(names(&no_batch), vec!["a", "c"]);

    // Pagination: pages of 4 return every object once, in order.
    let (all, _) = list_all(&mut c, "", 0).await;
    let (paged, _) = list_all(&mut c, "", 4).await;
    assert_eq!(names(&paged), names(&all));
    assert_eq!(all.len(), 27);
    let first = c
        .list(ListRequest {
            kind: "Director".into(),
            limit: 4,
            ..Default::default()
        })
        .await
        .expect("page")
        .into_inner();
    assert_eq!(first.objects_json.len(), 4);
    assert!(!first.continue_token.is_empty());

    // Delete with a stale precondition, then for real.
    let stale = c
        .delete(DeleteRequest {
            kind: "Director".into(),
            namespace: "default".into(),
            name: "a".into(),
            expected_revision: 1,
            ..Default::default()
        })
        .await
        .expect_err("stale delete");
    assert_eq!(stale.code(), Code::Aborted);
    let deleted = c
        .delete(DeleteRequest {
            kind: "Director".into(),
            namespace: "default".into(),
            name: "a".into(),
            expected_revision: 0,
            ..Default::default()
        })
        .await
        .expect("delete")
        .into_inner();
    assert!(deleted.revision > rv(&st));
}

/// Many writes at once through a follower travel to the leader in batches; each still gets its
/// own answer: the duplicates in the same burst are AlreadyExists, every other one is created
/// once with a distinct revision, and all of them are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_through_a_follower_each_get_their_own_answer() {
    let cluster = TestCluster::start(3).await;
    let follower = cluster.followers().await[0];
    let client = cluster.res(follower).await;
    let names: Vec<String> = (0..300).map(|i| format!("burst-{}", i % 250)).collect();
    let calls = names.iter().map(|name| {
        let mut c = client.clone();
        let json = director(name, &[]);
        async move { create(&mut c, json).await }
    });
    let results = futures::future::join_all(calls).await;

    let mut revisions = std::collections::BTreeSet::new();
    let mut duplicates = 0;
    for (name, result) in names.iter().zip(results) {
        match result {
            Ok(obj) => {
                assert_eq!(obj["metadata"]["name"], name.as_str());
                assert!(revisions.insert(rv(&obj)), "revision {} twice", rv(&obj));
            }
            Err(e) if e.code() == Code::AlreadyExists => duplicates += 1,
            Err(e) => panic!("create {name}: {e:?}"),
        }
    }
    assert_eq!((revisions.len(), duplicates), (250, 50));
    let mut leader = cluster.res(cluster.wait_leader().await).await;
    for i in 0..250 {
        get(
            &mut leader,
            &format!("burst-{i}"),
            Consistency::Linearizable,
        )
        .await
        .expect("stored");
    }
}

/// A node that takes connections and never answers (stopped with SIGSTOP, wedged) costs a read
/// a third of its deadline: the client moves on to the next endpoint and answers from there
/// (it had spent the whole deadline on the silent one, so `steward get` failed while another
/// node could answer). A write is not moved on: it may have reached the silent node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_moves_on_from_a_node_that_never_answers() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let mut c = cluster.res(leader).await;
    create(&mut c, director("quiet", &[]))
        .await
        .expect("create");

    // The kernel completes the TCP handshake for a listener nobody accepts from: the request
    // goes out and no answer ever comes, as from a stopped process.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_addr = silent.local_addr().expect("addr").to_string();
    let endpoints = vec![silent_addr, cluster.client_addr(leader)];
    let timeout = Duration::from_secs(6);
    let client =
        steward::client::Client::connect_with_timeout(&endpoints, timeout).expect("client");
    let started = Instant::now();
    let got = client
        .get("Director", "default", "quiet", Consistency::Linearizable)
        .await;
    let took = started.elapsed();
    // Answered at all, it did not spend its whole deadline on the silent node; and it did try
    // that node first and gave it its third (a lower bound: timers never fire early, where an
    // upper one fails whenever two busy cores are slow to answer).
    let object = got.unwrap_or_else(|e| panic!("the read failed after {took:?}: {e:?}"));
    assert_eq!(object["metadata"]["name"], "quiet");
    assert!(took >= timeout / 3, "the read took {took:?}");
    drop(silent);
}

/// A follower's linearizable reads share its ReadIndex calls to the leader (server/read_index.rs),
/// and sharing loses nothing: every read made after a write was acknowledged sees that write,
/// however many reads arrive together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_follower_reads_share_read_index_calls_and_see_acknowledged_writes() {
    use crate::observability::{http_get, sample};

    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let follower = cluster.followers().await[0];
    let mut writer = cluster.res(leader).await;
    let reader = cluster.res(follower).await;
    const READS: usize = 32;
    for round in 0..20 {
        let name = format!("shared-read-{round}");
        let written = create(&mut writer, director(&name, &[]))
            .await
            .expect("create through the leader");
        let reads: Vec<_> = (0..READS)
            .map(|_| {
                let (mut reader, name) = (reader.clone(), name.clone());
                tokio::spawn(
                    async move { get(&mut reader, &name, Consistency::Linearizable).await },
                )
            })
            .collect();
        for read in reads {
            let got = read
                .await
                .expect("read task")
                .unwrap_or_else(|s| panic!("round {round}: a read after the ack: {s:?}"));
            assert_eq!(got, written, "round {round}");
        }
    }
    let (code, text) = http_get(&cluster.metrics_addr(follower), "/metrics").await;
    assert_eq!(code, 200);
    let calls = sample(&text, "steward_read_index_calls_total").expect("calls series");
    let reads = sample(&text, "steward_read_index_reads_total").expect("reads series");
    // 640 reads of this test, and the health probe's.
    assert!(reads >= (20 * READS) as f64, "{reads} reads");
    assert!(
        calls >= 1.0 && calls < reads,
        "{reads} reads in {calls} calls: concurrent reads did not share a call"
    );
}
