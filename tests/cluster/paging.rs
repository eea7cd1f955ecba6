//! List pages pinned to the first page's revision (as Kubernetes' continue tokens are): later
//! pages read as of it whatever changed since, on any node; a token whose revision the node's
//! history no longer reaches is OutOfRange REVISION_COMPACTED, with a token to go on
//! inconsistently, and the Rust client's `list_all` starts such a list again.

use base64::Engine;
use steward::client::{reason, Client, ErrorReason, ListOptions};
use steward::proto::v1::*;
use tonic::Code;
use tonic_types::StatusExt;

use crate::harness::*;

/// One page of Directors, linearizable.
async fn page(
    c: &mut Res,
    selector: &str,
    limit: u32,
    token: &str,
) -> Result<ListReply, tonic::Status> {
    c.list(ListRequest {
        kind: "Director".into(),
        label_selector: selector.into(),
        limit,
        continue_token: token.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

fn objects(reply: &ListReply) -> Vec<serde_json::Value> {
    reply.objects_json.iter().map(|j| parse(j)).collect()
}

fn names(items: &[serde_json::Value]) -> Vec<&str> {
    items
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap_or(""))
        .collect()
}

/// Creates or replaces Director `name` with a new spec (`n`) and these labels.
async fn put(c: &mut Res, name: &str, env: &str, n: u32) {
    let mut object = parse(&director(name, &[("env", env)]));
    object["spec"]["options"] = format!("v{n}").into();
    let json = object.to_string();
    let updated = c
        .update(UpdateRequest {
            object_json: json.clone(),
            ..Default::default()
        })
        .await;
    match updated {
        Ok(_) => {}
        Err(e) if e.code() == Code::NotFound => {
            create(c, json).await.expect("create");
        }
        Err(e) => panic!("update {name}: {e:?}"),
    }
}

async fn delete(c: &mut Res, name: &str) {
    c.delete(DeleteRequest {
        kind: "Director".into(),
        namespace: "default".into(),
        name: name.into(),
        ..Default::default()
    })
    .await
    .expect("delete");
}

fn env(i: usize) -> &'static str {
    if i % 2 == 0 {
        "prod"
    } else {
        "dev"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_pages_read_as_of_the_first_page() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let followers = cluster.followers().await;
    let mut c = cluster.res(leader).await;
    for i in 0..10 {
        put(&mut c, &format!("d{i:02}"), env(i), 0).await;
    }
    // The whole list now, and the first pages at the same revision.
    let (then, at) = list_all(&mut c, "", 0).await;
    let first = page(&mut c, "", 4, "").await.expect("page 1");
    assert_eq!((objects(&first), first.revision), (then[..4].to_vec(), at));
    let prod_first = page(&mut c, "env=prod", 2, "").await.expect("prod page 1");
    assert_eq!(names(&objects(&prod_first)), ["d00", "d02"]);

    // Changes of every kind after it, on both sides of the first pages' ends.
    delete(&mut c, "d05").await; // deleted since: reappears
    put(&mut c, "d06", "dev", 1).await; // modified and out of env=prod since: as it was
    put(&mut c, "d07", "prod", 1).await; // into env=prod since: still out of it
    put(&mut c, "d045", "prod", 0).await; // created since: hidden
    put(&mut c, "d99", "prod", 0).await;
    delete(&mut c, "d00").await; // on page 1 already
    delete(&mut c, "d08").await; // deleted and created again: the old one
    put(&mut c, "d08", "dev", 2).await;
    put(&mut c, "d04", "dev", 1).await;
    put(&mut c, "d04", "prod", 2).await; // changed twice: the first version
    let (now, now_at) = list_all(&mut c, "", 0).await;
    assert!(now_at > at);
    assert_ne!(now, then);

    // The rest of the list is exactly as it was at page 1's revision, and says so, on the
    // leader and on a follower alike.
    let second = page(&mut c, "", 4, &first.continue_token)
        .await
        .expect("page 2");
    assert_eq!(
        (objects(&second), second.revision),
        (then[4..8].to_vec(), at)
    );
    let mut f = cluster.res(followers[0]).await;
    let third = page(&mut f, "", 4, &second.continue_token)
        .await
        .expect("page 3 on a follower");
    assert_eq!((objects(&third), third.revision), (then[8..].to_vec(), at));
    assert!(third.continue_token.is_empty());

    // A selector is read on the objects as they were.
    let mut prod = Vec::new();
    let mut token = prod_first.continue_token.clone();
    while !token.is_empty() {
        let next = page(&mut f, "env=prod", 2, &token)
            .await
            .expect("prod page");
        assert_eq!(next.revision, at);
        prod.extend(objects(&next));
        token = next.continue_token;
    }
    let then_prod: Vec<serde_json::Value> = then
        .iter()
        .filter(|o| ["d04", "d06", "d08"].contains(&o["metadata"]["name"].as_str().unwrap_or("")))
        .cloned()
        .collect();
    assert_eq!(prod, then_prod);

    // A token made before issue 25 pins no revision: its page reads the current state.
    let old = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
        r#"{"kind":"Director","after":{"kind":"Director","namespace":"default","name":"d03"}}"#,
    );
    let legacy = page(&mut c, "", 100, &old)
        .await
        .expect("a token without a revision");
    let now_after_d03: Vec<serde_json::Value> = now
        .iter()
        .filter(|o| o["metadata"]["name"].as_str().unwrap_or("") > "d03")
        .cloned()
        .collect();
    assert_eq!((objects(&legacy), legacy.revision), (now_after_d03, now_at));

    // The client follows the tokens to the list as of its first page.
    let client = Client::connect(&[cluster.client_addr(leader)]).expect("client");
    let opts = ListOptions {
        limit: 3,
        ..ListOptions::default()
    };
    let all = client
        .list_all_with("Director", &opts)
        .await
        .expect("list all");
    assert_eq!((all.items, all.revision), (now, now_at));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_older_than_the_kept_history_has_expired() {
    const HISTORY: usize = 6;
    let cluster = TestCluster::start_edited(3, |c| c.limits.watch_history = HISTORY).await;
    let leader = cluster.wait_leader().await;
    let mut c = cluster.res(leader).await;
    for i in 0..6 {
        put(&mut c, &format!("d{i:02}"), env(i), 0).await;
    }
    let (then, at) = list_all(&mut c, "", 0).await;
    let first = page(&mut c, "", 2, "").await.expect("page 1");
    assert_eq!(first.revision, at);

    // Within the history, the next page reads as of page 1.
    put(&mut c, "d02", "dev", 1).await;
    delete(&mut c, "d03").await;
    let second = page(&mut c, "", 2, &first.continue_token)
        .await
        .expect("page 2 within the history");
    assert_eq!(
        (objects(&second), second.revision),
        (then[2..4].to_vec(), at)
    );

    // More changes than the history keeps: the list has expired.
    for i in 0..HISTORY {
        put(&mut c, &format!("e{i:02}"), "dev", 0).await;
    }
    let err = page(&mut c, "", 2, &second.continue_token)
        .await
        .expect_err("expired");
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert_eq!(
        reason(&err),
        Some(ErrorReason::RevisionCompacted),
        "{err:?}"
    );
    assert!(steward::client::continue_expired(&err), "{err:?}");
    for part in [
        "continue_token",
        &format!("the list's revision {at} is older than the kept history"),
        "limits.watch_history, watch_history_bytes",
        "start the list again",
    ] {
        assert!(err.message().contains(part), "{part:?} in {err:?}");
    }
    let info = err.get_details_error_info().expect("ErrorInfo");
    let meta = |key: &str| info.metadata.get(key).cloned().unwrap_or_default();
    let (now, now_at) = list_all(&mut c, "", 0).await;
    assert_eq!(meta("current_revision"), now_at.to_string());
    let oldest: u64 = meta("oldest_revision").parse().expect("oldest_revision");
    assert!(at < oldest && oldest <= now_at, "{oldest}");

    // The token the refusal offers goes on after the same key, as of now.
    let rest = page(&mut c, "", 10, &meta("inconsistent_continue_token"))
        .await
        .expect("inconsistent continue");
    assert_eq!(rest.revision, now_at);
    let after_d03: Vec<serde_json::Value> = now
        .iter()
        .filter(|o| o["metadata"]["name"].as_str().unwrap_or("") > "d03")
        .cloned()
        .collect();
    assert_eq!(objects(&rest), after_d03);

    // A list started afresh reads through.
    let client = Client::connect(&[cluster.client_addr(leader)]).expect("client");
    let opts = ListOptions {
        limit: 2,
        ..ListOptions::default()
    };
    let all = client
        .list_all_with("Director", &opts)
        .await
        .expect("list all");
    assert_eq!((all.items, all.revision), (now, now_at));
}
