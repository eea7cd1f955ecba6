//! Pages as of a revision, rebuilt from the current state and the events since, against the page
//! the state at that revision gave: changes after it of every shape, one at a time and together.

use std::sync::Arc;

use serde_json::json;

use crate::apply::{apply, ApplyContext};
use crate::command::{Command, Event, ObjectCommand, Response, TxnOp};
use crate::objects::queries::ListPage;
use crate::objects::raw_json::RawJson;
use crate::objects::resource::{ObjectKey, Resource};
use crate::objects::selector::Selector;
use crate::state::State;

/// One object change, on a Director in namespace `default` unless the key says otherwise.
#[derive(Clone, Copy)]
enum Op {
    /// Creates the object, or updates it (a new spec each time) when it exists; `labels` are
    /// `k=v` pairs.
    Put(&'static str, &'static [(&'static str, &'static str)]),
    /// `Put` on a key of its own: (kind, namespace, name).
    PutAt((&'static str, &'static str, &'static str)),
    Status(&'static str, u8),
    Delete(&'static str),
    /// The ops as one txn.
    Txn(&'static [Op]),
}

/// A store driven through `apply`, its events kept.
struct Store {
    state: State,
    events: Vec<Event>,
    index: u64,
    specs: u64,
}

fn director(name: &str) -> (&'static str, String, String) {
    ("Director", "default".to_string(), name.to_string())
}

impl Store {
    fn new() -> Store {
        Store {
            state: State::new(),
            events: Vec::new(),
            index: 0,
            specs: 0,
        }
    }

    fn object(
        &mut self,
        (kind, ns, name): (&str, String, String),
        labels: &[(&str, &str)],
    ) -> Resource {
        self.specs += 1;
        let mut o = Resource::new("v1", kind, &ns, &name);
        o.spec = RawJson::from_value(&json!({ "n": self.specs }));
        o.metadata.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        o
    }

    fn txn_op(&mut self, op: Op) -> TxnOp {
        let put = |store: &mut Store, at: (&'static str, String, String), labels| {
            let object = store.object(at, labels);
            match store.state.get(&object.key()) {
                Some(_) => TxnOp::Update {
                    object,
                    expected_revision: None,
                },
                None => TxnOp::Create { object },
            }
        };
        match op {
            Op::Put(name, labels) => put(self, director(name), labels),
            Op::PutAt((kind, ns, name)) => put(self, (kind, ns.into(), name.into()), &[]),
            Op::Status(name, n) => {
                let mut object = self.state.get(&key(name)).expect("exists").clone();
                object.status = json!({ "n": n });
                TxnOp::UpdateStatus {
                    object,
                    expected_revision: None,
                }
            }
            Op::Delete(name) => TxnOp::Delete {
                key: key(name),
                expected_revision: None,
            },
            Op::Txn(_) => unreachable!("a txn holds single ops"),
        }
    }

    fn run(&mut self, ops: &[Op]) {
        for op in ops {
            let command = match op {
                Op::Txn(ops) => {
                    // Each op is built against the state before the txn: txns here touch a
                    // key once.
                    let ops = ops.iter().map(|op| self.txn_op(*op)).collect();
                    Command::Objects(ObjectCommand::Txn { ops, fence: None })
                }
                op => self.txn_op(*op).into_command(None),
            };
            self.run_command(command);
        }
    }

    fn run_command(&mut self, command: Command) {
        self.index += 1;
        let ctx = ApplyContext {
            log_index: self.index,
            term: 1,
            time_ms: 1_000 * self.index,
            stamped: true,
            wall_ms: None,
        };
        let response = apply(&mut self.state, &ctx, &command, &mut self.events);
        assert!(
            !matches!(response, Response::Rejected(_)),
            "{command}: {response:?}"
        );
    }

    /// The events after `revision`, oldest first.
    fn since(&self, revision: u64) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(move |e| e.revision > revision)
    }
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("Director", "default", name)
}

fn names(page: &ListPage) -> Vec<String> {
    page.items
        .iter()
        .map(|o| o.metadata.name.to_string())
        .collect()
}

/// What a list asks for.
struct Query {
    namespace: Option<&'static str>,
    selector: &'static str,
    after: Option<&'static str>,
}

const ALL: Query = Query {
    namespace: None,
    selector: "",
    after: None,
};

/// Runs `before`, pins the revision, runs `after`; then the Directors as of the pin, whole and
/// in pages of 1 and 2, equal what the pinned state itself lists, and their names are `want`.
fn check(before: &[Op], after: &[Op], query: Query, want: &[&str]) {
    let mut store = Store::new();
    store.run(before);
    let pinned = store.state.clone();
    let revision = pinned.revision();
    store.run(after);
    let selector = Selector::parse(query.selector).expect("selector");
    let start = query.after.map(key);
    let whole = store.state.list_as_of(
        "Director",
        query.namespace,
        &selector,
        start.as_ref(),
        0,
        store.since(revision),
    );
    let then = pinned.list("Director", query.namespace, &selector, start.as_ref(), 0);
    assert_eq!(whole, then);
    assert_eq!(names(&whole), want);
    for limit in [1, 2] {
        let mut at = start.clone();
        loop {
            let page = store.state.list_as_of(
                "Director",
                query.namespace,
                &selector,
                at.as_ref(),
                limit,
                store.since(revision),
            );
            let then = pinned.list("Director", query.namespace, &selector, at.as_ref(), limit);
            assert_eq!(page, then, "pages of {limit} after {at:?}");
            match page.next {
                Some(next) => at = Some(next),
                None => break,
            }
        }
    }
}

const PROD: &[(&str, &str)] = &[("env", "prod")];
const DEV: &[(&str, &str)] = &[("env", "dev")];

#[test]
fn nothing_changed_since_reads_as_now() {
    let before = [Op::Put("a", &[]), Op::Put("b", &[])];
    check(&before, &[], ALL, &["a", "b"]);
}

#[test]
fn an_object_created_since_is_hidden() {
    let before = [Op::Put("a", &[]), Op::Put("b", &[])];
    let after = [Op::Put("c", &[]), Op::Put("0", &[])];
    check(&before, &after, ALL, &["a", "b"]);
}

#[test]
fn an_object_modified_since_reads_as_it_was() {
    let before = [Op::Put("a", PROD), Op::Put("b", &[])];
    let after = [Op::Put("a", DEV), Op::Status("b", 1)];
    check(&before, &after, ALL, &["a", "b"]);
}

#[test]
fn an_object_deleted_since_reappears() {
    let after = [Op::Delete("a"), Op::Delete("c")];
    let before = [Op::Put("a", &[]), Op::Put("b", &[]), Op::Put("c", &[])];
    check(&before, &after, ALL, &["a", "b", "c"]);
}

#[test]
fn an_object_deleted_and_created_again_since_reads_as_the_old_one() {
    let before = [Op::Put("a", &[]), Op::Put("b", PROD)];
    let after = [Op::Delete("b"), Op::Put("b", DEV)];
    check(&before, &after, ALL, &["a", "b"]);
}

#[test]
fn an_object_created_and_deleted_since_stays_hidden() {
    let before = [Op::Put("a", &[]), Op::Put("c", &[])];
    let after = [Op::Put("b", &[]), Op::Delete("b")];
    check(&before, &after, ALL, &["a", "c"]);
}

#[test]
fn the_selector_reads_labels_as_they_were() {
    let env_prod = Query {
        selector: "env=prod",
        ..ALL
    };
    // b matches now but did not then; c matched then but does not now; d's label went away.
    let before = [
        Op::Put("a", PROD),
        Op::Put("b", DEV),
        Op::Put("c", PROD),
        Op::Put("d", PROD),
    ];
    let after = [Op::Put("b", PROD), Op::Put("c", DEV), Op::Put("d", &[])];
    check(&before, &after, env_prod, &["a", "c", "d"]);
}

#[test]
fn several_changes_to_one_key_undo_to_the_first() {
    let after = [
        Op::Put("a", DEV),
        Op::Status("a", 1),
        Op::Put("a", PROD),
        Op::Delete("a"),
        Op::Put("a", DEV),
        Op::Status("a", 2),
    ];
    let prod = Query {
        selector: "env=prod",
        ..ALL
    };
    let before = [Op::Put("a", PROD), Op::Put("b", PROD)];
    check(&before, &after, prod, &["a", "b"]);
}

#[test]
fn a_txn_since_is_undone_whole() {
    let before = [Op::Put("a", &[]), Op::Put("b", &[])];
    let after = [Op::Txn(&[
        Op::Put("c", &[]),
        Op::Delete("a"),
        Op::Put("b", DEV),
    ])];
    check(&before, &after, ALL, &["a", "b"]);
}

#[test]
fn other_kinds_and_namespaces_stay_out() {
    let after = [
        Op::PutAt(("DeploymentLock", "default", "a0")),
        Op::PutAt(("Director", "x", "a1")),
        Op::Delete("b"),
    ];
    let default_only = Query {
        namespace: Some("default"),
        ..ALL
    };
    let before = [
        Op::Put("a", &[]),
        Op::Put("b", &[]),
        Op::PutAt(("Director", "x", "z")),
    ];
    check(&before, &after, default_only, &["a", "b"]);
    check(&before, &after, ALL, &["a", "b", "z"]);
}

#[test]
fn changes_at_or_before_the_start_key_are_out_of_the_page() {
    let before = ["a", "b", "c", "d"].map(|n| Op::Put(n, &[]));
    let after = [
        Op::Delete("a"),
        Op::Put("b", DEV),
        Op::Put("bb", &[]),
        Op::Delete("d"),
        Op::Put("e", &[]),
    ];
    let from_b = Query {
        after: Some("b"),
        ..ALL
    };
    check(&before, &after, from_b, &["c", "d"]);
}

#[test]
fn pages_are_cut_on_the_view_as_it_was() {
    // Now: a, f, g; then: a..e. Pages of 2 as of then: [a, b] [c, d] [e].
    let before = ["a", "b", "c", "d", "e"].map(|n| Op::Put(n, &[]));
    let after = [
        Op::Delete("b"),
        Op::Delete("c"),
        Op::Delete("d"),
        Op::Delete("e"),
        Op::Put("f", &[]),
        Op::Put("g", &[]),
    ];
    check(&before, &after, ALL, &["a", "b", "c", "d", "e"]);
}

/// Every event carries the object its key held before: none for a create, the stored one (the
/// same `Arc`, no copy) for an update, a status update and a delete; a no-op update has no
/// event.
#[test]
fn events_carry_the_previous_object() {
    let mut store = Store::new();
    let stored = |store: &Store| Arc::clone(store.state.objects.get(&key("a")).expect("a"));
    store.run(&[Op::Put("a", PROD)]);
    let created = stored(&store);
    store.run(&[Op::Put("a", DEV)]);
    let updated = stored(&store);
    store.run(&[Op::Status("a", 1)]);
    let with_status = stored(&store);
    let events = store.events.len();
    let same = TxnOp::Update {
        object: Resource::clone(&with_status),
        expected_revision: None,
    };
    store.run_command(same.into_command(None));
    assert_eq!(store.events.len(), events, "a no-op update has no event");
    store.run(&[Op::Txn(&[Op::Delete("a")])]);

    let prevs: Vec<Option<&Arc<Resource>>> = store.events.iter().map(|e| e.prev.as_ref()).collect();
    assert_eq!(
        prevs,
        [None, Some(&created), Some(&updated), Some(&with_status)]
    );
    for (event, prev) in store.events[1..]
        .iter()
        .zip([&created, &updated, &with_status])
    {
        assert!(Arc::ptr_eq(event.prev.as_ref().expect("prev"), prev));
    }
}
