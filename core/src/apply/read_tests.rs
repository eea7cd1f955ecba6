//! Reads of an applied state: list scoping, selectors and paging; snapshots; uids.

use crate::command::MemberCommand;
use serde_json::json;

use super::tests::{create, delete, director, Log};

use super::*;
use crate::command::Command;
use crate::objects::apply::uid;
use crate::objects::queries::ListPage;
use crate::objects::resource::{ObjectKey, Resource};
use crate::objects::selector::Selector;
use crate::state::State;

fn lock(namespace: &str, name: &str, tier: &str) -> Resource {
    let mut r = Resource::new(
        "lock.servicefabrik.io/v1alpha1",
        "DeploymentLock",
        namespace,
        name,
    );
    r.metadata.labels.insert("tier".into(), tier.into());
    r
}

fn names(page: &ListPage) -> Vec<String> {
    let items = page.items.iter();
    items
        .map(|o| format!("{}/{}", o.metadata.namespace, o.metadata.name))
        .collect()
}

#[test]
fn list_scopes_filters_and_pages() {
    let mut log = Log::new();
    for (ns, name, tier) in [
        ("a", "l1", "db"),
        ("a", "l2", "web"),
        ("b", "l1", "db"),
        ("b", "l3", "db"),
    ] {
        log.ok(1, create(lock(ns, name, tier)));
    }
    log.ok(1, create(director("x")));
    let all = Selector::everything();
    let db = Selector::parse("tier=db").expect("parses");
    let s = &log.state;
    assert_eq!(
        names(&s.list("DeploymentLock", None, &all, None, 0)),
        ["a/l1", "a/l2", "b/l1", "b/l3"]
    );
    assert_eq!(
        names(&s.list("DeploymentLock", Some("b"), &all, None, 0)),
        ["b/l1", "b/l3"]
    );
    assert_eq!(
        names(&s.list("DeploymentLock", None, &db, None, 0)),
        ["a/l1", "b/l1", "b/l3"]
    );
    assert_eq!(
        names(&s.list("Director", Some("a"), &all, None, 0)),
        Vec::<String>::new()
    );
    assert_eq!(
        names(&s.list("Nothing", None, &all, None, 0)),
        Vec::<String>::new()
    );

    let p1 = s.list("DeploymentLock", None, &db, None, 2);
    assert_eq!(
        (names(&p1), p1.next.clone()),
        (
            vec!["a/l1".into(), "b/l1".into()],
            Some(ObjectKey::new("DeploymentLock", "b", "l1"))
        )
    );
    let p2 = s.list("DeploymentLock", None, &db, p1.next.as_ref(), 2);
    assert_eq!((names(&p2), p2.next), (vec!["b/l3".to_string()], None));
    // A full last page says so only if more keys follow in range.
    let p = s.list("DeploymentLock", Some("b"), &all, None, 2);
    assert_eq!(p.next, None);
    // `after` outside the scope: before it starts at the start, after it is empty.
    let before = ObjectKey::new("A", "z", "z");
    assert_eq!(
        names(&s.list("DeploymentLock", Some("b"), &all, Some(&before), 0)),
        ["b/l1", "b/l3"]
    );
    let beyond = ObjectKey::new("DeploymentLock", "c", "");
    assert!(s
        .list("DeploymentLock", Some("b"), &all, Some(&beyond), 0)
        .items
        .is_empty());
}

#[test]
fn snapshot_round_trips_and_rejects_bad_bodies() {
    let mut log = Log::new();
    log.ok(1_000, create(director("a")));
    log.ok(2_000, create(lock("ns", "l", "db")));
    log.ok(3_000, delete("a", None));
    log.run(
        4_000,
        Command::Members(MemberCommand::Retire { node_id: 9 }),
    );
    let bytes = log.state.to_snapshot_bytes();
    let back = State::from_snapshot_bytes(&bytes).expect("restores");
    assert_eq!(back, log.state);
    assert_eq!(
        back.to_snapshot_bytes(),
        bytes,
        "snapshot bytes are deterministic"
    );

    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    let mutate = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut b = body.clone();
        f(&mut b);
        State::from_snapshot_bytes(&serde_json::to_vec(&b).expect("ser"))
    };
    assert!(mutate(&|b| b["format"] = json!(99)).is_err_and(|e| e.contains("format 99")));
    assert!(mutate(&|b| b["revision"] = json!(1)).is_err_and(|e| e.contains("outside 1..=1")));
    let dup = |b: &mut serde_json::Value| {
        let first = b["objects"][0].clone();
        b["objects"].as_array_mut().expect("array").push(first);
    };
    assert!(mutate(&dup).is_err_and(|e| e.contains("twice")));
    assert!(State::from_snapshot_bytes(b"{").is_err());
    assert_eq!(
        State::from_snapshot_bytes(&State::new().to_snapshot_bytes()),
        Ok(State::new())
    );
}

#[test]
fn uids_are_uuid_shaped_and_distinct() {
    let ctx = ApplyContext {
        log_index: 0x1_2345_6789,
        term: 0xabcde,
        time_ms: 0,
        stamped: true,
        wall_ms: None,
    };
    assert_eq!(
        uid(&ctx, 0x0001_0000_0000_0002),
        "23456789-bcde-0001-0001-000000000002"
    );
    assert_ne!(uid(&ctx, 1), uid(&ctx, 2));
}
