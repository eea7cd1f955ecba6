//! etcd's v3 API on a 3-node steward: the real `etcdctl` (Debian's etcd-client) for what an
//! operator types, and a gRPC client of etcd's own wire types for the exact codes and words
//! etcd clients match on and for the Kubernetes storage contract (the Txn shapes of
//! k8s.io/apiserver's etcd3 store and of client/v3/kubernetes).

use std::process::Command;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use steward::proto::etcd::compare::{CompareResult, CompareTarget, TargetUnion};
use steward::proto::etcd::kv_client::KvClient;
use steward::proto::etcd::{
    request_op, response_op, CompactionRequest, Compare, DeleteRangeRequest, PutRequest,
    RangeRequest, RequestOp, TxnRequest,
};
use tonic::transport::Channel;
use tonic::Code;

use crate::harness::{have_etcdctl, TestCluster};

/// Runs `etcdctl` (API v3) against `endpoints`; returns (success, stdout, stderr).
pub async fn etcdctl(
    endpoints: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    let mut cmd = Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--command-timeout=10s")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let input = stdin.map(str::to_string);
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().expect("run etcdctl");
        if let Some(input) = input {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write etcdctl's stdin");
        }
        drop(child.stdin.take());
        child.wait_with_output().expect("etcdctl output")
    })
    .await
    .expect("join");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `etcdctl` that must succeed: its standard output.
pub async fn ok(endpoints: &str, args: &[&str]) -> String {
    let (success, stdout, stderr) = etcdctl(endpoints, args, None).await;
    assert!(success, "etcdctl {args:?} failed: {stderr}");
    stdout
}

/// (key, value, create revision, mod revision, version), as etcdctl prints them.
type Kv = (String, String, i64, i64, i64);

/// The JSON output of `etcdctl -w json get ...`: (key, value, create, mod, version) of each kv,
/// and the header's revision.
fn parse_get(json: &str) -> (Vec<Kv>, i64, Option<i64>) {
    let v: serde_json::Value = serde_json::from_str(json).expect("etcdctl json");
    let text = |v: &serde_json::Value| {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or(""))
            .expect("base64");
        String::from_utf8(raw).expect("utf-8")
    };
    let kvs = v["kvs"]
        .as_array()
        .map(|kvs| {
            kvs.iter()
                .map(|kv| {
                    (
                        text(&kv["key"]),
                        text(&kv["value"]),
                        kv["create_revision"].as_i64().unwrap_or(0),
                        kv["mod_revision"].as_i64().unwrap_or(0),
                        kv["version"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    (
        kvs,
        v["header"]["revision"].as_i64().expect("header revision"),
        v["count"].as_i64(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_puts_gets_deletes_txns_and_compacts_on_any_node() {
    if !have_etcdctl("etcdctl_puts_gets_deletes_txns_and_compacts_on_any_node") {
        return;
    }
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let one = |id| cluster.client_addr(id);
    let all = format!("{},{},{}", one(1), one(2), one(3));

    // Any node serves any request: each write through another one.
    assert_eq!(ok(&one(1), &["put", "app/a", "1"]).await.trim(), "OK");
    assert_eq!(ok(&one(2), &["put", "app/b", "2"]).await.trim(), "OK");
    assert_eq!(ok(&one(3), &["put", "app/a", "3"]).await.trim(), "OK");
    ok(&all, &["put", "other", "x"]).await;

    assert_eq!(ok(&one(2), &["get", "app/a"]).await, "app/a\n3\n");
    let (kvs, revision, _) = parse_get(&ok(&one(3), &["get", "app/a", "-w", "json"]).await);
    // No etcd write takes revision 1, the empty store's, as in etcd: the first is at 2.
    assert_eq!(kvs, [("app/a".into(), "3".into(), 2, 4, 2)]);
    assert_eq!(revision, 5);
    // The version before, at its revision.
    assert_eq!(
        ok(&one(1), &["get", "app/a", "--rev=2"]).await,
        "app/a\n1\n"
    );
    assert_eq!(
        ok(&one(1), &["get", "app/", "--prefix", "--keys-only"]).await,
        "app/a\n\napp/b\n\n"
    );
    let (kvs, _, count) = parse_get(
        &ok(
            &one(2),
            &["get", "app/", "--prefix", "--limit=1", "-w", "json"],
        )
        .await,
    );
    assert_eq!((kvs.len(), count), (1, Some(2)));
    assert_eq!(
        ok(
            &one(3),
            &[
                "get",
                "app/",
                "--prefix",
                "--sort-by=MODIFY",
                "--order=DESCEND"
            ]
        )
        .await,
        "app/a\n3\napp/b\n2\n"
    );
    assert_eq!(
        ok(&one(1), &["get", "app/b", "--from-key", "--keys-only"]).await,
        "app/b\n\nother\n\n"
    );
    // A linearizable read through a follower sees the write just made through another node;
    // a serializable one is served by the node alone.
    ok(&one(1), &["put", "fresh", "now"]).await;
    assert_eq!(ok(&one(3), &["get", "fresh"]).await, "fresh\nnow\n");
    let serial = ok(&one(2), &["get", "app/a", "--consistency=s"]).await;
    assert_eq!(serial, "app/a\n3\n");

    // txn: create app/c if absent; the compare holds, so success runs; then app/c exists, so
    // failure runs.
    let script = "create(\"app/c\") = \"0\"\n\nput app/c yes\n\nput app/c no\n\n";
    let (success, out, err) = etcdctl(&one(2), &["txn"], Some(script)).await;
    assert!(success, "{err}");
    assert_eq!(out, "SUCCESS\n\nOK\n");
    let (_, out, _) = etcdctl(&one(3), &["txn"], Some(script)).await;
    assert_eq!(out, "FAILURE\n\nOK\n");
    assert_eq!(ok(&one(1), &["get", "app/c"]).await, "app/c\nno\n");

    // del with prefix, and the deleted keys with --prev-kv.
    assert_eq!(
        ok(&one(3), &["del", "app/", "--prefix", "--prev-kv"]).await,
        "3\napp/a\n3\napp/b\n2\napp/c\nno\n"
    );
    assert_eq!(ok(&one(1), &["get", "app/", "--prefix"]).await, "");
    assert_eq!(ok(&one(1), &["del", "app/a"]).await.trim(), "0");

    // Compaction: older revisions are gone, with etcd's error; the compacted one still reads.
    assert_eq!(
        ok(&one(2), &["compaction", "5"]).await.trim(),
        "compacted revision 5"
    );
    let (success, _, err) = etcdctl(&one(3), &["get", "app/a", "--rev=4"], None).await;
    assert!(!success);
    assert!(
        err.contains("etcdserver: mvcc: required revision has been compacted"),
        "{err}"
    );
    assert_eq!(
        ok(&one(1), &["get", "app/a", "--rev=5"]).await,
        "app/a\n3\n"
    );
    let (success, _, err) = etcdctl(&one(1), &["compaction", "5"], None).await;
    assert!(
        !success && err.contains("required revision has been compacted"),
        "{err}"
    );
    let (success, _, err) = etcdctl(&one(1), &["get", "x", "--rev=1000"], None).await;
    assert!(
        !success && err.contains("required revision is a future revision"),
        "{err}"
    );
}

async fn kv(cluster: &TestCluster, id: u64) -> KvClient<Channel> {
    KvClient::new(cluster.channel(id).await)
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn put(key: &str, value: &str) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: b(key),
            value: b(value),
            ..PutRequest::default()
        })),
    }
}

fn get(key: &str) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key: b(key),
            ..RangeRequest::default()
        })),
    }
}

fn mod_is(key: &str, revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Mod as i32,
        key: b(key),
        target_union: Some(TargetUnion::ModRevision(revision)),
        range_end: Bytes::new(),
    }
}

fn refused(result: Result<impl std::fmt::Debug, tonic::Status>, code: Code, message: &str) {
    let status = result.expect_err("refused");
    assert_eq!(
        (status.code(), status.message()),
        (code, message),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_refusals_carry_etcds_codes_and_words_and_change_nothing() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut c = kv(&cluster, 2).await;
    let revision = |r: Option<steward::proto::etcd::ResponseHeader>| r.expect("header").revision;
    let first = c
        .put(PutRequest {
            key: b("k"),
            value: b("v"),
            ..PutRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let at = revision(first.header);

    refused(
        c.put(PutRequest::default()).await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
    refused(
        c.range(RangeRequest::default()).await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
    refused(
        c.put(PutRequest {
            key: b("k"),
            value: b("x"),
            ignore_value: true,
            ..PutRequest::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: value is provided",
    );
    refused(
        c.put(PutRequest {
            key: b("missing"),
            ignore_value: true,
            ..PutRequest::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: key not found",
    );
    refused(
        c.put(PutRequest {
            key: b("k"),
            lease: 12345,
            ..PutRequest::default()
        })
        .await,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
    refused(
        c.range(RangeRequest {
            key: b("k"),
            revision: at + 1000,
            ..RangeRequest::default()
        })
        .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision is a future revision",
    );
    // etcd's --max-txn-ops (128) at its limit and one past it.
    let many = |n: usize| TxnRequest {
        success: (0..n).map(|i| put(&format!("many/{i}"), "v")).collect(),
        ..TxnRequest::default()
    };
    refused(
        c.txn(many(129)).await,
        Code::InvalidArgument,
        "etcdserver: too many operations in txn request",
    );
    refused(
        c.txn(TxnRequest {
            success: vec![put("d", "1"), put("d", "2")],
            ..TxnRequest::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: duplicate key given in txn request",
    );
    // etcd's --max-request-bytes (1.5 MiB).
    refused(
        c.put(PutRequest {
            key: b("big"),
            value: Bytes::from(vec![b'x'; 1536 * 1024]),
            ..PutRequest::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: request is too large",
    );
    // None of that wrote anything.
    let now = c
        .range(RangeRequest {
            key: b("k"),
            ..RangeRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(revision(now.header), at);
    // ... and at the limits, both pass.
    let max = c.txn(many(128)).await.unwrap().into_inner();
    assert_eq!(revision(max.header), at + 1);
    let near = 1536 * 1024 - 64;
    // Sent to the leader: a command this big is some 6 MB as JSON (bytes are arrays of numbers
    // in steward's log and messages), and on CI's two loaded cores a debug build has taken past
    // the forward deadline with it (Unavailable, outcome unknown), past this client's 10 s
    // timeout (Cancelled), and through runs of elections that left no leader able to stamp it
    // (Unavailable, not applied). The put is idempotent, so it is sent again after any of
    // those, to the leader of the moment, until the cluster takes it or 90 s have passed.
    let until = std::time::Instant::now() + Duration::from_secs(90);
    let unsure = |s: &tonic::Status| {
        matches!(
            s.code(),
            Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded
        ) && std::time::Instant::now() < until
    };
    let big = loop {
        let mut leader = kv(&cluster, cluster.wait_leader().await).await;
        let sent = leader
            .put(PutRequest {
                key: b("big"),
                value: Bytes::from(vec![b'x'; near]),
                ..PutRequest::default()
            })
            .await;
        match sent {
            Ok(_) => {}
            Err(s) if unsure(&s) => continue,
            Err(s) => panic!("a put at the request limit: {s:?}"),
        }
        let read = leader
            .range(RangeRequest {
                key: b("big"),
                ..RangeRequest::default()
            })
            .await;
        match read {
            Ok(big) => break big.into_inner(),
            Err(s) if unsure(&s) => continue,
            Err(s) => panic!("reading back the put at the request limit: {s:?}"),
        }
    };
    assert_eq!(big.kvs[0].value.len(), near);

    // Compaction below what was compacted, or past the store, is refused as etcd does.
    c.compact(CompactionRequest {
        revision: at + 1,
        physical: true,
    })
    .await
    .unwrap();
    refused(
        c.compact(CompactionRequest {
            revision: at,
            physical: false,
        })
        .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );
    refused(
        c.range(RangeRequest {
            key: b("k"),
            revision: at,
            ..RangeRequest::default()
        })
        .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );
}

/// The Txn shapes of Kubernetes' storage layer (k8s.io/apiserver etcd3 store, client/v3's
/// kubernetes package): create if absent, optimistic update and delete by mod revision with
/// the current object on conflict, the compactor's txn on `compact_rev_key`, and a paginated
/// list pinned at the first page's revision, with the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_storage_contract_holds() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut c = kv(&cluster, 3).await;
    let key = "/registry/pods/default/p1";

    // Create: only if the key does not exist (mod_revision == 0).
    let create = |value: &str| TxnRequest {
        compare: vec![mod_is(key, 0)],
        success: vec![put(key, value)],
        failure: vec![],
    };
    let created = c.txn(create("v1")).await.unwrap().into_inner();
    assert!(created.succeeded);
    let rv = created.header.unwrap().revision;
    assert!(!c.txn(create("again")).await.unwrap().into_inner().succeeded);

    // OptimisticPut: update at the revision read; on conflict, the current object comes back.
    let update = |at: i64, value: &str| TxnRequest {
        compare: vec![mod_is(key, at)],
        success: vec![put(key, value)],
        failure: vec![get(key)],
    };
    let updated = c.txn(update(rv, "v2")).await.unwrap().into_inner();
    assert!(updated.succeeded);
    let rv2 = updated.header.unwrap().revision;
    let stale = c.txn(update(rv, "lost")).await.unwrap().into_inner();
    assert!(!stale.succeeded);
    let Some(response_op::Response::ResponseRange(current)) = &stale.responses[0].response else {
        panic!("{stale:?}")
    };
    assert_eq!(
        (current.kvs[0].mod_revision, &current.kvs[0].value[..]),
        (rv2, &b"v2"[..])
    );

    // OptimisticDelete, the same way.
    let delete = |at: i64| TxnRequest {
        compare: vec![mod_is(key, at)],
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(
                DeleteRangeRequest {
                    key: b(key),
                    prev_kv: true,
                    ..DeleteRangeRequest::default()
                },
            )),
        }],
        failure: vec![get(key)],
    };
    assert!(!c.txn(delete(rv)).await.unwrap().into_inner().succeeded);
    let deleted = c.txn(delete(rv2)).await.unwrap().into_inner();
    assert!(deleted.succeeded);
    let Some(response_op::Response::ResponseDeleteRange(gone)) = &deleted.responses[0].response
    else {
        panic!("{deleted:?}")
    };
    assert_eq!((gone.deleted, &gone.prev_kvs[0].value[..]), (1, &b"v2"[..]));

    // The compactor: whoever moves compact_rev_key's version from what it read compacts.
    let compactor = |version: i64, at: i64| TxnRequest {
        compare: vec![Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Version as i32,
            key: b("compact_rev_key"),
            target_union: Some(TargetUnion::Version(version)),
            range_end: Bytes::new(),
        }],
        success: vec![put("compact_rev_key", &at.to_string())],
        failure: vec![get("compact_rev_key")],
    };
    let won = c.txn(compactor(0, rv2)).await.unwrap().into_inner();
    assert!(won.succeeded);
    c.compact(CompactionRequest {
        revision: rv2,
        physical: false,
    })
    .await
    .unwrap();
    let lost = c.txn(compactor(0, rv2)).await.unwrap().into_inner();
    let Some(response_op::Response::ResponseRange(seen)) = &lost.responses[0].response else {
        panic!("{lost:?}")
    };
    assert_eq!(seen.kvs[0].version, 1);

    // A paginated list: the first page's revision pins the rest; writes after it are unseen.
    for i in 0..7 {
        c.put(PutRequest {
            key: b(&format!("/registry/cm/ns/c{i}")),
            value: b("x"),
            ..PutRequest::default()
        })
        .await
        .unwrap();
    }
    let page = |key: Bytes, revision: i64| RangeRequest {
        key,
        range_end: b("/registry/cm/ns0"),
        limit: 3,
        revision,
        ..RangeRequest::default()
    };
    let first = c
        .range(page(b("/registry/cm/ns/"), 0))
        .await
        .unwrap()
        .into_inner();
    let pinned = first.header.unwrap().revision;
    assert_eq!((first.kvs.len(), first.more, first.count), (3, true, 7));
    c.put(PutRequest {
        key: b("/registry/cm/ns/c0a"),
        value: b("late"),
        ..PutRequest::default()
    })
    .await
    .unwrap();
    let mut seen: Vec<Bytes> = first.kvs.iter().map(|kv| kv.key.clone()).collect();
    let mut more = first.more;
    while more {
        let mut next = seen.last().unwrap().to_vec();
        next.push(0);
        let page = c
            .range(page(Bytes::from(next), pinned))
            .await
            .unwrap()
            .into_inner();
        more = page.more;
        seen.extend(page.kvs.iter().map(|kv| kv.key.clone()));
    }
    let names: Vec<_> = seen
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(
        names,
        (0..7)
            .map(|i| format!("/registry/cm/ns/c{i}"))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lists_members_reports_status_health_hashes_and_saves_a_snapshot() {
    if !have_etcdctl("etcdctl_lists_members_reports_status_health_hashes_and_saves_a_snapshot") {
        return;
    }
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let all: Vec<String> = (1..=3).map(|id| cluster.client_addr(id)).collect();
    let endpoints = all.join(",");
    ok(&all[0], &["put", "k", "v"]).await;

    // member list: id, status, name, peer and client URLs, learner.
    let members = ok(&all[1], &["member", "list"]).await;
    for id in 1..=3 {
        let node = &cluster.nodes[&id].config;
        let line = format!(
            "{id}, started, steward-{id}, http://{}, http://{}, false",
            node.peer_addr, node.client_addr
        );
        assert!(members.contains(&line), "{line} not in\n{members}");
    }

    // endpoint status: version, leader, Raft term and index, as JSON.
    let status = ok(&endpoints, &["endpoint", "status", "-w", "json"]).await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    let status = status.as_array().expect("one per endpoint");
    assert_eq!(status.len(), 3);
    for s in status {
        let s = &s["Status"];
        assert_eq!(s["version"], "3.5.17");
        assert_eq!(s["leader"].as_u64(), Some(leader));
        assert!(s["raftIndex"].as_u64().unwrap_or(0) >= 2, "{s}");
        assert!(s["dbSize"].as_i64().unwrap_or(0) > 0, "{s}");
    }
    // (etcdctl 3.4 prints health to standard error.)
    let (healthy, out, err) = etcdctl(&endpoints, &["endpoint", "health"], None).await;
    let health = format!("{out}{err}");
    assert!(healthy, "{health}");
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");

    // hashkv: every member the same.
    let hashes = ok(&endpoints, &["endpoint", "hashkv"]).await;
    let values: std::collections::BTreeSet<&str> = hashes
        .lines()
        .filter_map(|l| l.split(", ").nth(1))
        .collect();
    assert_eq!(values.len(), 1, "{hashes}");

    // snapshot save: etcd's framing around a steward backup, which steward reads.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("snap.db");
    let file = file.to_str().expect("utf-8 path");
    let (saved, _, err) = etcdctl(&all[2], &["snapshot", "save", file], None).await;
    assert!(saved, "{err}");
    let len = std::fs::metadata(file).expect("saved").len();
    assert_eq!(len % 512, 32, "etcd's framing: blocks of 512 and a SHA-256");
    let out =
        crate::harness::steward_cli(&cluster.endpoint(1), None, &["snapshot", "status", file])
            .await;
    assert!(
        out.lines().nth(1).is_some_and(|l| l.starts_with("2 ")),
        "{out}"
    );

    // What steward cannot do as etcd asks is refused with what to do instead.
    let (added, _, err) = etcdctl(
        &all[0],
        &["member", "add", "n4", "--peer-urls=http://127.0.0.1:1"],
        None,
    )
    .await;
    assert!(
        !added && err.contains("steward member add-learner"),
        "{err}"
    );
}

/// etcd's auto-compaction: in revision mode the leader keeps the newest `retention` revisions;
/// in periodic mode it keeps `retention` of history (here 2 s of cluster time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_auto_compacts_by_revisions_kept_or_by_time() {
    let by_revision = TestCluster::start_edited(3, |c| {
        c.etcd.auto_compaction_mode = "revision".into();
        c.etcd.auto_compaction_retention = "5".into();
        c.etcd.auto_compaction_interval_ms = 200;
    })
    .await;
    by_revision.wait_leader().await;
    let mut c = kv(&by_revision, 2).await;
    let mut last = 0;
    for i in 0..20 {
        last = c
            .put(PutRequest {
                key: b("k"),
                value: b(&i.to_string()),
                ..PutRequest::default()
            })
            .await
            .unwrap()
            .into_inner()
            .header
            .unwrap()
            .revision;
    }
    let compacted_at = |c: KvClient<Channel>, rev: i64| async move {
        let mut c = c;
        let read = c
            .range(RangeRequest {
                key: b("k"),
                revision: rev,
                ..RangeRequest::default()
            })
            .await;
        matches!(read, Err(s) if s.code() == Code::OutOfRange)
    };
    crate::harness::wait_for(
        "compaction to 5 revisions back",
        Duration::from_secs(10),
        || {
            let c = c.clone();
            async move { compacted_at(c, last - 6).await.then_some(()) }
        },
    )
    .await;
    // The newest 5 revisions still read.
    assert!(!compacted_at(c.clone(), last - 5).await);
    drop(by_revision);

    let by_time = TestCluster::start_edited(3, |c| {
        c.etcd.auto_compaction_mode = "periodic".into();
        c.etcd.auto_compaction_retention = "2s".into();
    })
    .await;
    by_time.wait_leader().await;
    let mut c = kv(&by_time, 1).await;
    let first = c
        .put(PutRequest {
            key: b("t"),
            value: b("old"),
            ..PutRequest::default()
        })
        .await
        .unwrap()
        .into_inner()
        .header
        .unwrap()
        .revision;
    let started = std::time::Instant::now();
    // Keep writing; the first revision goes once 2 s of history lie after it.
    crate::harness::wait_for("periodic compaction", Duration::from_secs(15), || {
        let mut c = c.clone();
        async move {
            c.put(PutRequest {
                key: b("t"),
                value: b("new"),
                ..PutRequest::default()
            })
            .await
            .ok()?;
            compacted_at(c, first).await.then_some(())
        }
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "compacted after {:?}, with 2 s of history to keep",
        started.elapsed()
    );
}

/// With steward's authentication on, an etcd client logs in as a steward user (its token as
/// the password), and is refused with etcd's texts where steward refuses it; with it off, the
/// Auth RPCs answer as etcd's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_clients_log_in_as_steward_users_and_get_etcds_refusals() {
    use steward::proto::etcd::auth_client::AuthClient;
    use steward::proto::etcd::{AuthStatusRequest, AuthenticateRequest};
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut auth = AuthClient::new(cluster.channel(2).await);
    let status = auth
        .auth_status(AuthStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!status.enabled);
    refused(
        auth.authenticate(AuthenticateRequest {
            name: "root".into(),
            password: "x".into(),
        })
        .await,
        Code::FailedPrecondition,
        "etcdserver: authentication is not enabled",
    );
    let open = steward::client::Client::connect(&[cluster.endpoint(1)]).expect("client");
    let root = open
        .user_add("root", &["admin".to_string()], false)
        .await
        .unwrap()
        .token;
    let reader = open
        .user_add("reader", &["read-only".to_string()], false)
        .await
        .unwrap()
        .token;
    open.auth_enable(true).await.unwrap();
    // Every node, not only the one logged in through: the reads below go to node 3, and a node
    // that applies the change while a read waits on its read index refuses that read as etcd
    // does a stale token's (InvalidArgument "revision of auth store is old": server::etcd).
    for id in 1..=3 {
        wait_for_auth(&mut AuthClient::new(cluster.channel(id).await)).await;
    }

    refused(
        auth.authenticate(AuthenticateRequest {
            name: "root".into(),
            password: reader.clone(),
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: authentication failed, invalid user ID or password",
    );
    let token = auth
        .authenticate(AuthenticateRequest {
            name: "reader".into(),
            password: reader.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .token;
    let with = |token: &str, request: RangeRequest| {
        let mut request = tonic::Request::new(request);
        request
            .metadata_mut()
            .insert("token", token.parse().expect("ascii token"));
        request
    };
    let mut c = kv(&cluster, 3).await;
    let get = RangeRequest {
        key: b("k"),
        ..RangeRequest::default()
    };
    // The reader reads; it may not write; no token and a wrong one are refused as etcd does.
    c.range(with(&token, get.clone())).await.unwrap();
    let put_as = |token: &str| {
        let mut request = tonic::Request::new(PutRequest {
            key: b("k"),
            value: b("v"),
            ..PutRequest::default()
        });
        request
            .metadata_mut()
            .insert("token", token.parse().expect("ascii token"));
        request
    };
    refused(
        c.put(put_as(&token)).await,
        Code::PermissionDenied,
        "etcdserver: permission denied",
    );
    c.put(put_as(&root)).await.unwrap();
    refused(
        c.range(get.clone()).await,
        Code::InvalidArgument,
        "etcdserver: user name is empty",
    );
    refused(
        c.range(with("reader.forged", get)).await,
        Code::Unauthenticated,
        "etcdserver: invalid auth token",
    );
}

/// Until this node has applied authentication on.
async fn wait_for_auth(auth: &mut steward::proto::etcd::auth_client::AuthClient<Channel>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = auth
            .auth_status(steward::proto::etcd::AuthStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        if status.enabled {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "auth never on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
