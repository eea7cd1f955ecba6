//! Table-driven `apply` sequences with made-up leader times: every operation, every rejection.

use crate::command::{AlarmReply, AuthReply, ObjectReply};
use crate::command::{MemberCommand, ObjectCommand};
use crate::objects::command::TXN_OPS_MAX;
use serde_json::json;

use super::*;
use crate::command::EventType;
use crate::command::{Command, Event, Response, TxnOp};
use crate::objects::raw_json::RawJson;
use crate::objects::resource::{ObjectKey, Resource};
use crate::objects::validate::{ANNOTATIONS_BYTES_MAX, OBJECT_BYTES_MAX};
use crate::rejection::Rejection;
use crate::state::State;

/// Runs commands as consecutive log entries of term 2.
pub(super) struct Log {
    pub(super) state: State,
    pub(super) events: Vec<Event>,
    index: u64,
}

impl Log {
    pub(super) fn new() -> Log {
        Log {
            state: State::new(),
            events: Vec::new(),
            index: 0,
        }
    }

    pub(super) fn run(&mut self, time_ms: u64, cmd: Command) -> Response {
        self.index += 1;
        let ctx = ApplyContext {
            log_index: self.index,
            term: 2,
            time_ms,
            stamped: true,
            wall_ms: None,
        };
        apply(&mut self.state, &ctx, &cmd, &mut self.events)
    }

    /// Runs a command that must succeed and returns its object(s).
    pub(super) fn ok(&mut self, time_ms: u64, cmd: Command) -> Vec<Resource> {
        match self.run(time_ms, cmd) {
            Response::Objects(ObjectReply::Object { object, revision }) => {
                assert_eq!(revision, self.state.revision());
                vec![object]
            }
            Response::Objects(ObjectReply::Txn { objects, revision }) => {
                assert_eq!(revision, self.state.revision());
                objects
            }
            other => panic!("expected success, got {other:?}"),
        }
    }

    /// Runs a command that must be rejected with `want`, and checks that nothing changed but
    /// time.
    fn rejected(&mut self, time_ms: u64, cmd: Command, want: Rejection) {
        let before = self.state.clone();
        let events_before = self.events.len();
        let got = self.run(time_ms, cmd);
        assert_eq!(got, Response::Rejected(want));
        assert_eq!(
            self.events.len(),
            events_before,
            "a rejection emitted events"
        );
        assert!(self.state.time_ms >= before.time_ms);
        let after = self.state.with_clock_of(&before);
        assert_eq!(after, before, "a rejection changed the state");
    }

    fn event_summary(&self) -> Vec<(EventType, u64, String)> {
        let summary = self.events.iter();
        summary
            .map(|e| (e.event_type, e.revision, e.object.metadata.name.to_string()))
            .collect()
    }
}

pub(super) fn director(name: &str) -> Resource {
    let mut r = Resource::new(
        "deployment.servicefabrik.io/v1alpha1",
        "Director",
        "default",
        name,
    );
    r.spec = RawJson::from_value(&json!({ "options": "{}" }));
    r.metadata.labels.insert("state".into(), "in_queue".into());
    r
}

pub(super) fn key(name: &str) -> ObjectKey {
    ObjectKey::new("Director", "default", name)
}

pub(super) fn create(object: Resource) -> Command {
    Command::Objects(ObjectCommand::Create {
        object,
        fence: None,
    })
}

fn update(object: Resource, expected_revision: Option<u64>) -> Command {
    Command::Objects(ObjectCommand::Update {
        object,
        expected_revision,
        fence: None,
    })
}

fn update_status(object: Resource, expected_revision: Option<u64>) -> Command {
    Command::Objects(ObjectCommand::UpdateStatus {
        object,
        expected_revision,
        fence: None,
    })
}

pub(super) fn delete(name: &str, expected_revision: Option<u64>) -> Command {
    Command::Objects(ObjectCommand::Delete {
        key: key(name),
        expected_revision,
        fence: None,
    })
}

fn txn(ops: Vec<TxnOp>) -> Command {
    Command::Objects(ObjectCommand::Txn { ops, fence: None })
}

fn invalid(field: &str) -> impl Fn(&Response) -> bool + '_ {
    move |r| matches!(r, Response::Rejected(Rejection::Invalid { field: f, .. }) if f == field)
}

#[test]
fn create_sets_server_fields_and_ignores_client_ones() {
    let mut log = Log::new();
    let mut input = director("d1");
    input.metadata.uid = "client-uid".into();
    input.metadata.resource_version = 99;
    input.metadata.generation = 7;
    input.metadata.creation_timestamp = "1999-01-01T00:00:00Z".into();
    input.status = json!({ "state": "in_queue" });
    let out = log.ok(1_532_518_141_500, create(input.clone())).remove(0);
    assert_eq!(out.metadata.uid, "00000001-0002-0000-0000-000000000001");
    assert_eq!(out.metadata.resource_version, 1);
    assert_eq!(out.metadata.generation, 1);
    assert_eq!(out.metadata.creation_timestamp, "2018-07-25T11:29:01Z");
    assert_eq!((&out.spec, &out.status), (&input.spec, &input.status));
    assert_eq!(log.state.get(&key("d1")), Some(&out));
    assert_eq!(log.state.revision(), 1);
    assert_eq!(log.event_summary(), [(EventType::Added, 1, "d1".into())]);
    assert_eq!(*log.events[0].object, out);
}

#[test]
fn create_rejections() {
    let mut log = Log::new();
    log.ok(10, create(director("d1")));
    log.rejected(
        20,
        create(director("d1")),
        Rejection::AlreadyExists { key: key("d1") },
    );
    let mut bad = director("D1");
    let r = log.run(30, create(bad.clone()));
    assert!(invalid("metadata.name")(&r), "{r:?}");
    bad = director("d2");
    bad.metadata
        .annotations
        .insert("k".into(), "x".repeat(ANNOTATIONS_BYTES_MAX));
    let r = log.run(40, create(bad));
    assert!(
        matches!(r, Response::Rejected(Rejection::TooLarge { .. })),
        "{r:?}"
    );
    assert_eq!((log.state.revision(), log.state.len()), (1, 1));
    assert_eq!(log.events.len(), 1);
}

#[test]
fn update_replaces_user_fields_and_keeps_the_rest() {
    let mut log = Log::new();
    let created = log.ok(1_000, create(director("d1"))).remove(0);
    log.ok(
        2_000,
        update_status(with_status(director("d1"), "in_progress"), None),
    );

    // Labels only: new revision, same generation, status kept.
    let mut input = director("d1");
    input
        .metadata
        .labels
        .insert("state".into(), "update".into());
    input.status = json!({ "state": "ignored" });
    let out = log.ok(3_000, update(input, Some(2))).remove(0);
    assert_eq!(out.metadata.resource_version, 3);
    assert_eq!(out.metadata.generation, 1);
    assert_eq!(out.status, json!({ "state": "in_progress" }));
    assert_eq!(out.metadata.uid, created.metadata.uid);
    assert_eq!(
        out.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );
    assert_eq!(out.metadata.labels["state"], "update");

    // Spec change: generation + 1; apiVersion replaced.
    let mut input = out.clone();
    input.spec = RawJson::from_value(&json!({ "options": "{\"size\":2}" }));
    input.api_version = "deployment.servicefabrik.io/v1beta1".into();
    let out = log.ok(4_000, update(input, None)).remove(0);
    assert_eq!(
        (out.metadata.resource_version, out.metadata.generation),
        (4, 2)
    );
    assert_eq!(out.api_version, "deployment.servicefabrik.io/v1beta1");
    assert_eq!(log.state.get(&key("d1")), Some(&out));
    assert_eq!(
        log.event_summary(),
        [
            (EventType::Added, 1, "d1".into()),
            (EventType::Modified, 2, "d1".into()),
            (EventType::Modified, 3, "d1".into()),
            (EventType::Modified, 4, "d1".into()),
        ]
    );
}

#[test]
fn noop_updates_change_nothing() {
    let mut log = Log::new();
    let created = log.ok(1_000, create(director("d1"))).remove(0);
    let before = log.state.clone();
    // Status and bookkeeping in the input are not compared by Update.
    let mut same = created.clone();
    same.status = json!({ "x": 1 });
    same.metadata.resource_version = 0;
    assert_eq!(
        log.ok(2_000, update(same, Some(1))),
        std::slice::from_ref(&created)
    );
    assert_eq!(
        log.ok(3_000, update_status(created.clone(), None)),
        [created]
    );
    assert_eq!(log.state.revision(), 1);
    assert_eq!(log.events.len(), 1);
    assert_eq!(log.state.objects, before.objects);
}

#[test]
fn a_spec_that_differs_only_in_key_order_or_whitespace_is_unchanged() {
    let body = |spec: &str| {
        let text = format!(
            r#"{{"kind":"Director","apiVersion":"v1","metadata":{{"name":"d1"}},"spec":{spec}}}"#
        );
        Resource::from_json(&text).expect("parses")
    };
    let mut log = Log::new();
    let created = log
        .ok(1, create(body(r#"{"b":[1,{"y":2,"x":1}],"a":"é"}"#)))
        .remove(0);
    let same = body(" {\n \"a\" : \"\\u00e9\", \"b\": [ 1, { \"x\": 1, \"y\": 2 } ] } ");
    assert_eq!(log.ok(2, update(same, None)), [created]);
    assert_eq!(log.state.revision(), 1);
    let changed = body(r#"{"a":"é","b":[1,{"x":1,"y":3}]}"#);
    let out = log.ok(3, update(changed, None)).remove(0);
    assert_eq!(
        (out.metadata.resource_version, out.metadata.generation),
        (2, 2)
    );
    assert_eq!(out.spec.as_str(), r#"{"a":"é","b":[1,{"x":1,"y":3}]}"#);
}

#[test]
fn update_rejections() {
    let mut log = Log::new();
    log.ok(1, create(director("d1")));
    log.rejected(
        2,
        update(director("nope"), None),
        Rejection::NotFound { key: key("nope") },
    );
    let conflict = Rejection::Conflict {
        key: key("d1"),
        expected: 7,
        actual: 1,
    };
    log.rejected(3, update(director("d1"), Some(7)), conflict.clone());
    log.rejected(4, update_status(director("d1"), Some(7)), conflict);
    let mut bad = director("d1");
    bad.metadata
        .labels
        .insert("state".into(), "not valid!".into());
    let r = log.run(5, update(bad, None));
    assert!(invalid("metadata.labels[\"state\"]")(&r), "{r:?}");
    let mut bad = director("d1");
    bad.kind = "director".into();
    assert!(invalid("kind")(&log.run(6, update_status(bad, None))));
    let r = log.run(
        7,
        update_status(with_status_value(director("d1"), json!(3)), None),
    );
    assert!(invalid("status")(&r), "{r:?}");
    let big = json!({ "blob": "x".repeat(OBJECT_BYTES_MAX) });
    let r = log.run(
        8,
        update_status(with_status_value(director("d1"), big), None),
    );
    assert!(
        matches!(r, Response::Rejected(Rejection::TooLarge { .. })),
        "{r:?}"
    );
    log.rejected(
        9,
        update_status(director("gone"), None),
        Rejection::NotFound { key: key("gone") },
    );
    assert_eq!(log.state.revision(), 1);
}

#[test]
fn update_status_touches_status_only() {
    let mut log = Log::new();
    let created = log.ok(1, create(director("d1"))).remove(0);
    let mut input = with_status(director("d1"), "succeeded");
    input.spec = RawJson::from_value(&json!({ "ignored": true }));
    input.metadata.labels.clear();
    let out = log.ok(2, update_status(input, Some(1))).remove(0);
    let mut want = created;
    want.status = json!({ "state": "succeeded" });
    want.metadata.resource_version = 2;
    assert_eq!(out, want);
    assert_eq!(log.state.get(&key("d1")), Some(&want));
}

#[test]
fn delete_returns_the_object_at_the_deletion_revision() {
    let mut log = Log::new();
    let first = log.ok(1_000, create(director("d1"))).remove(0);
    log.ok(1_000, create(director("d2")));
    let deleted = log.ok(2_000, delete("d1", Some(1))).remove(0);
    let mut want = first.clone();
    want.metadata.resource_version = 3;
    assert_eq!(deleted, want);
    assert_eq!(log.state.get(&key("d1")), None);
    assert_eq!(
        log.events.last().map(|e| (e.event_type, e.revision)),
        Some((EventType::Deleted, 3))
    );
    assert_eq!(*log.events[2].object, want);
    // Re-creating gets a fresh identity.
    let again = log.ok(3_000, create(director("d1"))).remove(0);
    assert_ne!(again.metadata.uid, first.metadata.uid);
    assert_eq!(
        (again.metadata.resource_version, again.metadata.generation),
        (4, 1)
    );
}

#[test]
fn delete_rejections() {
    let mut log = Log::new();
    log.ok(1, create(director("d1")));
    log.rejected(
        2,
        delete("d9", None),
        Rejection::NotFound { key: key("d9") },
    );
    let conflict = Rejection::Conflict {
        key: key("d1"),
        expected: 0,
        actual: 1,
    };
    log.rejected(3, delete("d1", Some(0)), conflict);
    let bad = Command::Objects(ObjectCommand::Delete {
        key: ObjectKey::new("Director", "Default", "d1"),
        expected_revision: None,
        fence: None,
    });
    assert!(invalid("metadata.namespace")(&log.run(4, bad)));
    assert_eq!(log.state.len(), 1);
}

fn with_status(mut r: Resource, state: &str) -> Resource {
    r.status = json!({ "state": state });
    r
}

fn with_status_value(mut r: Resource, status: serde_json::Value) -> Resource {
    r.status = status;
    r
}

#[test]
fn txn_ops_see_each_other_and_get_their_own_revisions() {
    let mut log = Log::new();
    log.ok(1, create(director("old")));
    let mut changed = director("d1");
    changed.spec = RawJson::from_value(&json!({ "options": "v2" }));
    let objects = log.ok(
        2,
        Command::Objects(ObjectCommand::Txn {
            ops: vec![
                TxnOp::Create {
                    object: director("d1"),
                },
                TxnOp::Update {
                    object: changed,
                    expected_revision: Some(2),
                },
                TxnOp::UpdateStatus {
                    object: with_status(director("d1"), "in_queue"),
                    expected_revision: Some(3),
                },
                TxnOp::Delete {
                    key: key("old"),
                    expected_revision: Some(1),
                },
            ],
            fence: None,
        }),
    );
    let revs: Vec<(u64, u64)> = objects
        .iter()
        .map(|o| (o.metadata.resource_version, o.metadata.generation))
        .collect();
    assert_eq!(revs, [(2, 1), (3, 2), (4, 2), (5, 1)]);
    assert_eq!(log.state.revision(), 5);
    assert_eq!(log.state.get(&key("d1")), Some(&objects[2]));
    assert_eq!(log.state.get(&key("old")), None);
    let types: Vec<(EventType, u64)> = log
        .events
        .iter()
        .map(|e| (e.event_type, e.revision))
        .collect();
    use EventType::*;
    assert_eq!(
        types,
        [
            (Added, 1),
            (Added, 2),
            (Modified, 3),
            (Modified, 4),
            (Deleted, 5)
        ]
    );
}

#[test]
fn failed_txn_leaves_no_trace() {
    let mut log = Log::new();
    log.ok(1, create(director("a")));
    log.ok(1, create(director("b")));
    let ops = vec![
        TxnOp::Delete {
            key: key("a"),
            expected_revision: None,
        },
        TxnOp::Create {
            object: director("a"),
        },
        TxnOp::UpdateStatus {
            object: with_status(director("b"), "x"),
            expected_revision: None,
        },
        TxnOp::Create {
            object: director("c"),
        },
        TxnOp::Update {
            object: director("b"),
            expected_revision: Some(2),
        },
    ];
    let cause = Rejection::Conflict {
        key: key("b"),
        expected: 2,
        actual: 5,
    };
    let want = Rejection::TxnOpFailed {
        index: 4,
        cause: Box::new(cause),
    };
    log.rejected(2, txn(ops), want);

    let ops = vec![
        TxnOp::Create {
            object: director("c"),
        },
        TxnOp::Create {
            object: director("c"),
        },
    ];
    let cause = Box::new(Rejection::AlreadyExists { key: key("c") });
    log.rejected(3, txn(ops), Rejection::TxnOpFailed { index: 1, cause });

    let ops = vec![
        TxnOp::Delete {
            key: key("a"),
            expected_revision: None,
        },
        TxnOp::Create {
            object: director("BAD"),
        },
    ];
    let r = log.run(4, txn(ops));
    assert!(
        matches!(&r, Response::Rejected(Rejection::TxnOpFailed { index: 1, cause })
            if matches!(**cause, Rejection::Invalid { .. })),
        "{r:?}"
    );
    assert_eq!(
        (log.state.revision(), log.state.len(), log.events.len()),
        (2, 2, 2)
    );
}

#[test]
fn txn_size_limits() {
    let mut log = Log::new();
    log.rejected(
        1,
        txn(vec![]),
        Rejection::Invalid {
            field: "ops".into(),
            rule: "at least one op".into(),
        },
    );
    let ops = vec![
        TxnOp::Delete {
            key: key("a"),
            expected_revision: None
        };
        TXN_OPS_MAX + 1
    ];
    let r = log.run(2, txn(ops));
    assert!(
        matches!(r, Response::Rejected(Rejection::TooLarge { ref field, .. }) if field == "ops")
    );
    let ops: Vec<TxnOp> = (0..TXN_OPS_MAX)
        .map(|i| TxnOp::Create {
            object: director(&format!("d{i}")),
        })
        .collect();
    assert_eq!(log.ok(3, txn(ops)).len(), TXN_OPS_MAX);
}

#[test]
fn time_never_runs_backwards() {
    let mut log = Log::new();
    log.ok(5_000, create(director("a")));
    // A new leader with a slow clock: creation time uses the larger, earlier time.
    let b = log.ok(2_000, create(director("b"))).remove(0);
    assert_eq!(log.state.time_ms(), 5_000);
    assert_eq!(b.metadata.creation_timestamp, "1970-01-01T00:00:05Z");
    apply_blank(
        &mut log.state,
        &ApplyContext {
            log_index: 9,
            term: 3,
            time_ms: 61_000,
            stamped: true,
            wall_ms: None,
        },
    );
    assert_eq!(log.state.time_ms(), 61_000);
    apply_blank(
        &mut log.state,
        &ApplyContext {
            log_index: 10,
            term: 3,
            time_ms: 1,
            stamped: true,
            wall_ms: None,
        },
    );
    assert_eq!(log.state.time_ms(), 61_000);
    // Rejections may advance time (documented), nothing else.
    log.run(70_000, create(director("a")));
    assert_eq!(log.state.time_ms(), 70_000);
    let far = log.ok(u64::MAX, create(director("c"))).remove(0);
    assert_eq!(far.metadata.creation_timestamp, "9999-12-31T23:59:59Z");
}

#[test]
fn retire_node_is_recorded_and_idempotent() {
    let mut log = Log::new();
    log.ok(1, create(director("a")));
    assert_eq!(
        log.run(2, Command::Members(MemberCommand::Retire { node_id: 3 })),
        Response::Done { revision: 1 }
    );
    assert_eq!(
        log.run(3, Command::Members(MemberCommand::Retire { node_id: 3 })),
        Response::Done { revision: 1 }
    );
    assert!(log.state.is_retired(3));
    assert!(!log.state.is_retired(4));
    assert_eq!(
        log.state.ensure_not_retired(3),
        Err(Rejection::NodeRetired { node_id: 3 })
    );
    assert_eq!(log.state.ensure_not_retired(4), Ok(()));
    assert_eq!(log.events.len(), 1);
}

#[test]
fn revision_exhaustion_is_a_rejection_not_a_panic() {
    let mut log = Log::new();
    log.state.revision = u64::MAX;
    let r = log.run(1, create(director("a")));
    assert!(
        matches!(r, Response::Rejected(Rejection::TooLarge { ref field, .. }) if field == "revision")
    );
    assert!(log.state.is_empty());
}

#[test]
fn a_guarded_command_applies_only_at_the_auth_revision_it_was_authorized_at() {
    use crate::auth::{AuthAction, Role};
    let mut log = Log::new();
    let guarded = |rev: u64, name: &str| Command::Guarded {
        auth_revision: rev,
        command: Box::new(create(director(name))),
    };
    // Revision 0 before any user: a guard at 0 passes.
    log.ok(10, guarded(0, "a"));
    let add = Command::Auth(AuthAction::AddUser {
        name: "root".into(),
        roles: vec![Role::Admin],
        token_sha256: None,
    });
    match log.run(20, add) {
        Response::Auth(AuthReply {
            revision: 1,
            enabled: false,
            user: Some(user),
        }) => assert_eq!((user.name.as_str(), user.created_ms), ("root", 20)),
        other => panic!("{other:?}"),
    }
    // Authorized before the change: refused, nothing applied, and it says so.
    log.rejected(
        30,
        guarded(0, "b"),
        Rejection::AuthChanged {
            authorized_at: 0,
            now: 1,
        },
    );
    assert!(log.state.get(&key("b")).is_none());
    // Authorized at the current revision: applied, with its own response.
    assert_eq!(log.ok(40, guarded(1, "b"))[0].metadata.name, "b");
    // The users survive a snapshot round trip.
    let bytes = log.state.to_snapshot_bytes();
    let restored = State::from_snapshot_bytes(&bytes).expect("snapshot");
    assert_eq!(restored, log.state);
    assert_eq!(restored.auth().revision, 1);
}

fn alarm(action: crate::alarms::AlarmAction) -> Command {
    Command::Alarms(action)
}

/// While a NOSPACE alarm is raised, what may grow the state is refused and changes nothing;
/// deletes (alone or in a txn) pass; a guarded command is judged by what it wraps; the alarm
/// survives a snapshot; once disarmed, writes pass again.
#[test]
fn no_space_refuses_growth_until_disarmed() {
    use crate::alarms::{AlarmAction, AlarmKind};
    let mut log = Log::new();
    log.ok(10, create(director("a")));
    log.ok(11, create(director("b")));
    let raised = log.run(
        12,
        alarm(AlarmAction::Raise {
            node_id: 2,
            kind: AlarmKind::NoSpace,
            reason: "data dir holds 9 MiB".into(),
        }),
    );
    let Response::Alarms(AlarmReply { alarms }) = raised else {
        panic!("expected alarms, got {raised:?}");
    };
    let no_space = Rejection::NoSpace {
        alarm: alarms[0].clone(),
    };
    assert_eq!(alarms[0].raised_ms, 12);
    log.rejected(13, create(director("c")), no_space.clone());
    log.rejected(14, update(director("a"), None), no_space.clone());
    log.rejected(15, update_status(director("a"), None), no_space.clone());
    let mixed = txn(vec![
        TxnOp::Delete {
            key: key("a"),
            expected_revision: None,
        },
        TxnOp::Create {
            object: director("c"),
        },
    ]);
    log.rejected(16, mixed, no_space.clone());
    let guarded = Command::Guarded {
        auth_revision: 0,
        command: Box::new(create(director("c"))),
    };
    log.rejected(17, guarded, no_space.clone());
    assert!(no_space.to_string().contains("alarm NOSPACE on node 2"));

    // Space can be won back.
    log.ok(18, delete("a", None));
    let deletes_only = txn(vec![TxnOp::Delete {
        key: key("b"),
        expected_revision: None,
    }]);
    log.ok(19, deletes_only);

    let restored = State::from_snapshot_bytes(&log.state.to_snapshot_bytes()).expect("restore");
    assert_eq!(restored, log.state);
    assert!(restored.alarms().has(2, AlarmKind::NoSpace));

    let disarmed = log.run(
        20,
        alarm(AlarmAction::Disarm {
            node_id: None,
            kind: None,
        }),
    );
    assert_eq!(disarmed, Response::Alarms(AlarmReply { alarms: vec![] }));
    log.ok(21, create(director("c")));
}
