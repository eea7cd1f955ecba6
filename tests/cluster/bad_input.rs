//! Bad input: malformed or over-limit requests each get the right code and change nothing.

use steward::config::Limits;
use steward::proto::v1::*;
use tonic::Code;

use crate::harness::*;

fn obj(v: serde_json::Value) -> String {
    v.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_precise_codes_and_change_nothing() {
    let limits = Limits {
        object_bytes_max: 4096,
        request_bytes_max: 16384,
        txn_ops_max: 4,
        list_page_max: 50,
        list_page_default: 10,
        ..Limits::default()
    };
    let cluster = TestCluster::start_with(3, test_raft(10_000, 1_000), limits).await;
    let leader = cluster.wait_leader().await;
    let follower = cluster.followers().await[0];
    let mut c = cluster.res(leader).await;
    let existing = create(&mut c, director("exists", &[]))
        .await
        .expect("create");
    let (before, rev_before) = list_all(&mut c, "", 0).await;

    let ok_meta = |name: &str| serde_json::json!({"name": name});
    let create_cases: Vec<(&str, String, Code, &str)> = vec![
        ("not json", "{".into(), Code::InvalidArgument, "body"),
        (
            "no kind",
            obj(serde_json::json!({"apiVersion":"v1","metadata":ok_meta("x")})),
            Code::InvalidArgument,
            "kind",
        ),
        (
            "lowercase kind",
            obj(serde_json::json!({"kind":"director","apiVersion":"v1","metadata":ok_meta("x")})),
            Code::InvalidArgument,
            "kind",
        ),
        (
            "no apiVersion",
            obj(serde_json::json!({"kind":"Director","metadata":ok_meta("x")})),
            Code::InvalidArgument,
            "apiVersion",
        ),
        (
            "bad name",
            obj(
                serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":ok_meta("Bad_Name")}),
            ),
            Code::InvalidArgument,
            "metadata.name",
        ),
        (
            "empty name",
            obj(serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":ok_meta("")})),
            Code::InvalidArgument,
            "metadata.name",
        ),
        (
            "long name",
            obj(
                serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":ok_meta(&"a".repeat(254))}),
            ),
            Code::InvalidArgument,
            "metadata.name",
        ),
        (
            "bad namespace",
            obj(
                serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":{"name":"x","namespace":"NS!"}}),
            ),
            Code::InvalidArgument,
            "metadata.namespace",
        ),
        (
            "bad label key",
            obj(
                serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":{"name":"x","labels":{"-bad":"v"}}}),
            ),
            Code::InvalidArgument,
            "labels",
        ),
        (
            "bad label value",
            obj(
                serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":{"name":"x","labels":{"ok":"has space"}}}),
            ),
            Code::InvalidArgument,
            "labels",
        ),
        (
            "long label value",
            obj(
                serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":{"name":"x","labels":{"ok":"v".repeat(64)}}}),
            ),
            Code::InvalidArgument,
            "labels",
        ),
        (
            "object too large",
            obj(
                serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":ok_meta("x"),"spec":{"b":"z".repeat(5000)}}),
            ),
            Code::ResourceExhausted,
            "object_bytes_max",
        ),
        (
            "already exists",
            director("exists", &[]),
            Code::AlreadyExists,
            "exists",
        ),
    ];
    for (what, json, code, needle) in &create_cases {
        for node in [leader, follower] {
            let mut c = cluster.res(node).await;
            let err = create(&mut c, json.clone()).await.expect_err(what);
            assert_eq!(err.code(), *code, "{what} on node {node}: {err:?}");
            assert!(
                err.message().contains(needle),
                "{what}: message {:?} should name {needle}",
                err.message()
            );
        }
    }

    // Update / delete / get / list / txn / watch rejections.
    let mut stale = existing.clone();
    stale["spec"]["x"] = 1.into();
    let e = c
        .update(UpdateRequest {
            object_json: stale.to_string(),
            expected_revision: rv(&existing) + 1,
            ..Default::default()
        })
        .await
        .expect_err("stale update");
    assert_eq!(e.code(), Code::Aborted, "{e:?}");
    let e = c
        .update(UpdateRequest {
            object_json: director("missing", &[]),
            expected_revision: 0,
            ..Default::default()
        })
        .await
        .expect_err("update missing");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = c
        .delete(DeleteRequest {
            kind: "Director".into(),
            namespace: "default".into(),
            name: "missing".into(),
            expected_revision: 0,
            ..Default::default()
        })
        .await
        .expect_err("delete missing");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = c
        .get(GetRequest {
            kind: "Director".into(),
            namespace: String::new(),
            name: "Bad Name".into(),
            consistency: 0,
        })
        .await
        .expect_err("bad get key");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = c
        .get(GetRequest {
            kind: "Director".into(),
            namespace: String::new(),
            name: "x".into(),
            consistency: 9,
        })
        .await
        .expect_err("bad consistency");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = c
        .list(ListRequest {
            kind: "Director".into(),
            limit: 51,
            ..Default::default()
        })
        .await
        .expect_err("page too big");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("list_page_max"), "{e:?}");
    let e = c
        .list(ListRequest {
            kind: "Director".into(),
            label_selector: "a in (b".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad selector");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = c
        .list(ListRequest {
            kind: "Director".into(),
            continue_token: "garbage!".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad continue");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let create_op = |n: &str| TxnOp {
        op: Some(txn_op::Op::Create(CreateRequest {
            object_json: director(n, &[]),
            ..Default::default()
        })),
    };
    let e = c
        .txn(TxnRequest {
            ops: (0..5).map(|i| create_op(&format!("t{i}"))).collect(),
            ..Default::default()
        })
        .await
        .expect_err("txn too big");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("txn_ops_max"), "{e:?}");
    let e = c
        .txn(TxnRequest {
            ops: vec![],
            ..Default::default()
        })
        .await
        .expect_err("empty txn");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = c
        .txn(TxnRequest {
            ops: vec![create_op("t-ok"), create_op("exists")],
            ..Default::default()
        })
        .await
        .expect_err("txn with a conflict");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    let e = c
        .watch(WatchRequest {
            kind: String::new(),
            ..Default::default()
        })
        .await
        .expect_err("watch without kind");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // A request over limits.request_bytes_max is refused by the transport before it is decoded.
    let huge = obj(
        serde_json::json!({"kind":"Director","apiVersion":"v1","metadata":ok_meta("huge"),"spec":{"b":"z".repeat(20_000)}}),
    );
    let e = create(&mut c, huge).await.expect_err("request too large");
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert!(e.message().contains("16384"), "{e:?}");

    // Nothing changed: same objects, same revision.
    let (after, rev_after) = list_all(&mut c, "", 0).await;
    assert_eq!(after, before);
    assert_eq!(rev_after, rev_before);
}
