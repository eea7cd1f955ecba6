//! Table-driven keyspace sequences through the real `apply_effects`: revisions, versions, MVCC
//! reads, compaction, txns (compares, nesting, one revision), etcd's checks and refusals.

use super::*;
use crate::apply::apply_effects;
use crate::command::{Command, Response};
use crate::effects::{ApplyContext, Effects};
use crate::objects::command::ObjectCommand;
use crate::objects::resource::Resource;
use crate::rejection::Rejection;
use crate::state::State;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

struct Store {
    state: State,
    effects: Effects,
    index: u64,
}

impl Store {
    /// A store at revision 1, as etcd's empty one is: its first write is at 2
    /// (`write_revision`).
    fn new() -> Store {
        let mut state = State::new();
        state.revision = 1;
        Store {
            state,
            effects: Effects::default(),
            index: 0,
        }
    }

    fn run(&mut self, command: impl Into<Command>) -> Response {
        let time_ms = self.state.time_ms() + 1;
        self.run_at(time_ms, command)
    }

    /// Runs a command stamped with cluster time `time_ms`.
    fn run_at(&mut self, time_ms: u64, command: impl Into<Command>) -> Response {
        self.index += 1;
        let ctx = ApplyContext {
            log_index: self.index,
            term: 1,
            time_ms,
            stamped: true,
            wall_ms: None,
        };
        apply_effects(&mut self.state, &ctx, &command.into(), &mut self.effects)
    }

    fn txn(&mut self, txn: Txn) -> TxnResult {
        match self.run(KvCommand::Txn(txn)) {
            Response::Kv(KvReply::Txn(result)) => result,
            other => panic!("expected a txn result, got {other:?}"),
        }
    }

    /// A txn that must be refused with `want`, changing nothing but the clock.
    fn refused(&mut self, command: KvCommand, want: KvError) {
        let before = self.state.clone();
        let events = self.effects.kv_events.len();
        assert_eq!(self.run(command), Response::Rejected(Rejection::Kv(want)));
        assert_eq!(self.state.with_clock_of(&before), before);
        assert_eq!(self.effects.kv_events.len(), events);
    }

    fn put(&mut self, key: &str, value: &str) -> TxnResult {
        self.txn(Txn::of(put(key, value)))
    }

    fn delete(&mut self, key: &str, range_end: &str) -> TxnResult {
        self.txn(Txn::of(RequestOp::Delete(DeleteOp {
            key: b(key),
            range_end: b(range_end),
            prev_kv: true,
        })))
    }

    fn range(&self, op: RangeOp) -> Result<RangeResult, KvError> {
        self.state.kv().range(&op, self.state.revision())
    }

    fn get(&self, key: &str, revision: u64) -> Option<KeyValue> {
        let op = RangeOp {
            key: b(key),
            revision,
            ..RangeOp::default()
        };
        self.range(op).ok()?.kvs.into_iter().next()
    }

    fn keys(&self, op: RangeOp) -> Vec<String> {
        let result = self.range(op).unwrap();
        result
            .kvs
            .iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .collect()
    }
}

fn put(key: &str, value: &str) -> RequestOp {
    RequestOp::Put(PutOp {
        key: b(key),
        value: b(value),
        prev_kv: true,
        ..PutOp::default()
    })
}

fn get(key: &str) -> RequestOp {
    RequestOp::Range(RangeOp {
        key: b(key),
        ..RangeOp::default()
    })
}

fn compare(key: &str, op: CompareOp, target: CompareTarget) -> Compare {
    Compare {
        key: b(key),
        range_end: Bytes::new(),
        op,
        target,
    }
}

fn prefix(p: &str) -> (Bytes, Bytes) {
    let mut end = p.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    (b(p), Bytes::from(end))
}

#[test]
fn puts_count_versions_and_a_delete_starts_the_key_over() {
    let mut s = Store::new();
    assert_eq!(s.put("a", "1").revision, 2);
    assert_eq!(s.put("a", "2").revision, 3);
    let a = s.get("a", 0).unwrap();
    assert_eq!(
        (a.create_revision, a.mod_revision, a.version, &a.value[..]),
        (2, 3, 2, &b"2"[..])
    );
    let deleted = s.delete("a", "");
    assert_eq!(deleted.revision, 4);
    assert!(
        matches!(&deleted.responses[0], OpResult::Delete { deleted: 1, prev_kvs } if prev_kvs[0].value == b("2"))
    );
    assert_eq!(s.get("a", 0), None);
    s.put("a", "3");
    let a = s.get("a", 0).unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version), (5, 5, 1));
    // The put answered the version it replaced only when there was one.
    let again = s.put("a", "4");
    assert!(matches!(&again.responses[0], OpResult::Put { prev_kv: Some(p) } if p.value == b("3")));
}

#[test]
fn every_old_revision_reads_as_it_was() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.put("b", "1"); // 3
    s.put("a", "2"); // 4
    s.delete("b", ""); // 5
    assert_eq!(s.get("a", 1), None);
    assert_eq!(s.get("a", 2).unwrap().value, b("1"));
    assert_eq!(s.get("a", 3).unwrap().value, b("1"));
    assert_eq!(s.get("a", 4).unwrap().value, b("2"));
    assert_eq!(s.get("b", 4).unwrap().value, b("1"));
    assert_eq!(s.get("b", 5), None);
    let all = |rev| RangeOp {
        key: b("\0"),
        range_end: b("\0"),
        revision: rev,
        ..RangeOp::default()
    };
    assert_eq!(s.keys(all(3)), ["a", "b"]);
    assert_eq!(s.keys(all(0)), ["a"]);
    assert_eq!(s.range(all(6)).unwrap_err(), KvError::FutureRevision);
}

#[test]
fn revisions_are_shared_with_typed_objects_and_no_write_takes_revision_1() {
    let mut s = Store::new();
    s.state.revision = 0;
    // A typed object may take revision 1; a keyspace write never does.
    let object = Resource::new("v1", "Director", "default", "d1");
    s.run(ObjectCommand::Create {
        object,
        fence: None,
    });
    assert_eq!(s.state.revision(), 1);
    assert_eq!(s.put("a", "1").revision, 2);
    let object = Resource::new("v1", "Director", "default", "d2");
    s.run(ObjectCommand::Create {
        object,
        fence: None,
    });
    assert_eq!(s.put("a", "2").revision, 4);
    assert_eq!(s.get("a", 3).unwrap().value, b("1"));
    let mut empty = Store::new();
    empty.state.revision = 0;
    assert_eq!(empty.put("k", "v").revision, 2);
    assert_eq!(empty.get("k", 0).unwrap().create_revision, 2);
    assert_eq!(empty.get("k", 1), None);
}

#[test]
fn a_txn_is_one_revision_and_its_events_come_in_order() {
    let mut s = Store::new();
    s.put("x", "0");
    let result = s.txn(Txn {
        compare: vec![compare("x", CompareOp::Equal, CompareTarget::Value(b("0")))],
        success: vec![put("a", "1"), put("b", "1"), get("a")],
        failure: vec![],
    });
    assert!(result.succeeded);
    assert_eq!(result.revision, 3);
    // The range after the put sees it.
    let OpResult::Range(read) = &result.responses[2] else {
        panic!("{result:?}")
    };
    assert_eq!(read.kvs[0].mod_revision, 3);
    let events: Vec<_> = s.effects.kv_events[1..]
        .iter()
        .map(|e| (e.kv.key.clone(), e.kv.mod_revision))
        .collect();
    assert_eq!(events, [(b("a"), 3), (b("b"), 3)]);
    // A history knows each change's place in its revision.
    assert_eq!(s.state.kv.keys.get(&b"b"[..]).unwrap()[0].sub, 1);
}

#[test]
fn a_txn_that_writes_nothing_takes_no_revision() {
    let mut s = Store::new();
    s.put("a", "1");
    let result = s.delete("nothing", "");
    assert_eq!(result.revision, 2);
    assert!(matches!(
        result.responses[0],
        OpResult::Delete { deleted: 0, .. }
    ));
    let read_only = s.txn(Txn::of(get("a")));
    assert_eq!(read_only.revision, 2);
    assert_eq!(s.state.revision(), 2);
}

#[test]
fn compares_read_every_target_and_a_missing_key_as_zero() {
    let mut s = Store::new();
    s.put("k", "v"); // 2
    s.put("k", "w"); // 3: create 2, mod 3, version 2
    let holds = |s: &mut Store, c: Compare| {
        s.txn(Txn {
            compare: vec![c],
            ..Txn::default()
        })
        .succeeded
    };
    use CompareOp::*;
    use CompareTarget::*;
    assert!(holds(&mut s, compare("k", Equal, Version(2))));
    assert!(holds(&mut s, compare("k", Greater, Version(1))));
    assert!(holds(&mut s, compare("k", Less, Create(3))));
    assert!(holds(&mut s, compare("k", Equal, Mod(3))));
    assert!(holds(&mut s, compare("k", NotEqual, Value(b("v")))));
    assert!(holds(&mut s, compare("k", Greater, Value(b("v")))));
    assert!(holds(&mut s, compare("k", Equal, Lease(0))));
    // Kubernetes' create: mod_revision == 0 of a key that does not exist.
    assert!(holds(&mut s, compare("missing", Equal, Mod(0))));
    assert!(holds(&mut s, compare("missing", Equal, Create(0))));
    // No value compare holds for a missing key, not even against the empty value.
    assert!(!holds(
        &mut s,
        compare("missing", Equal, Value(Bytes::new()))
    ));
    assert!(!holds(&mut s, compare("missing", NotEqual, Value(b("x")))));
    // A range compare: every key must pass.
    s.put("k2", "v"); // 4
    let (key, range_end) = prefix("k");
    let ranged = |op, target| Compare {
        key: key.clone(),
        range_end: range_end.clone(),
        op,
        target,
    };
    assert!(holds(&mut s, ranged(Greater, Mod(2))));
    assert!(!holds(&mut s, ranged(Greater, Mod(3))));
}

#[test]
fn failure_runs_when_a_compare_fails_and_nested_txns_decide_before_any_write() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    let result = s.txn(Txn {
        compare: vec![compare("a", CompareOp::Equal, CompareTarget::Value(b("0")))],
        success: vec![put("never", "x")],
        failure: vec![
            put("a", "2"),
            // Decided on the store before the txn: a is still "1" here.
            RequestOp::Txn(Txn {
                compare: vec![compare("a", CompareOp::Equal, CompareTarget::Value(b("1")))],
                success: vec![put("b", "nested")],
                failure: vec![],
            }),
        ],
    });
    assert!(!result.succeeded);
    let OpResult::Txn(nested) = &result.responses[1] else {
        panic!("{result:?}")
    };
    assert!(nested.succeeded);
    assert_eq!(nested.revision, 3);
    assert_eq!(s.get("b", 0).unwrap().mod_revision, 3);
    assert_eq!(s.get("never", 0), None);
}

#[test]
fn a_key_written_twice_in_one_branch_is_refused() {
    let mut s = Store::new();
    s.put("a", "1");
    let dup = |success| {
        KvCommand::Txn(Txn {
            success,
            ..Txn::default()
        })
    };
    s.refused(
        dup(vec![put("a", "1"), put("a", "2")]),
        KvError::DuplicateKey,
    );
    let delete_all = RequestOp::Delete(DeleteOp {
        key: b("a"),
        range_end: b("z"),
        prev_kv: false,
    });
    s.refused(
        dup(vec![delete_all.clone(), put("b", "1")]),
        KvError::DuplicateKey,
    );
    let nested = |success| {
        RequestOp::Txn(Txn {
            success,
            ..Txn::default()
        })
    };
    s.refused(
        dup(vec![put("a", "1"), nested(vec![put("a", "2")])]),
        KvError::DuplicateKey,
    );
    // Allowed: overlapping deletes; the same key in the two branches of a txn; a put beside a
    // delete that cannot reach it.
    s.txn(Txn {
        success: vec![delete_all.clone(), delete_all],
        ..Txn::default()
    });
    s.txn(Txn {
        compare: vec![],
        success: vec![put("a", "s")],
        failure: vec![put("a", "f")],
    });
    let either = RequestOp::Txn(Txn {
        compare: vec![],
        success: vec![put("x", "s")],
        failure: vec![put("x", "f")],
    });
    s.txn(Txn::of(either));
    assert_eq!(s.get("x", 0).unwrap().value, b("s"));
}

#[test]
fn etcds_request_checks_refuse_and_change_nothing() {
    let mut s = Store::new();
    s.put("a", "1");
    let one = |op| KvCommand::Txn(Txn::of(op));
    s.refused(one(put("", "x")), KvError::EmptyKey);
    let keep = |f: fn(&mut PutOp)| {
        let mut p = PutOp {
            key: b("a"),
            ..PutOp::default()
        };
        f(&mut p);
        RequestOp::Put(p)
    };
    s.refused(
        one(keep(|p| {
            p.ignore_value = true;
            p.value = b("x");
        })),
        KvError::ValueProvided,
    );
    s.refused(
        one(keep(|p| {
            p.ignore_lease = true;
            p.lease = 7;
        })),
        KvError::LeaseProvided,
    );
    s.refused(
        one(keep(|p| {
            p.ignore_value = true;
            p.key = b("missing");
        })),
        KvError::KeyNotFound,
    );
    // A lease must exist.
    s.refused(one(keep(|p| p.lease = 7)), KvError::LeaseNotFound);
    // A refused request in the branch that runs refuses the whole txn, writes before it too.
    s.refused(
        KvCommand::Txn(Txn {
            success: vec![put("b", "1"), keep(|p| p.lease = 7)],
            ..Txn::default()
        }),
        KvError::LeaseNotFound,
    );
    // ... but not one in the branch that does not run.
    let result = s.txn(Txn {
        compare: vec![],
        success: vec![put("b", "1")],
        failure: vec![keep(|p| p.lease = 7)],
    });
    assert!(result.succeeded);
    // ignore_value keeps the value.
    s.txn(Txn::of(keep(|p| p.ignore_value = true)));
    let a = s.get("a", 0).unwrap();
    assert_eq!((&a.value[..], a.version), (&b"1"[..], 2));
    let too_many = Txn {
        success: (0..3).map(|i| put(&format!("k{i}"), "v")).collect(),
        ..Txn::default()
    };
    assert_eq!(too_many.check(2), Err(KvError::TooManyOps));
    assert_eq!(too_many.check(3), Ok(()));
}

#[test]
fn range_sorts_limits_filters_and_counts_as_etcd_does() {
    let mut s = Store::new();
    s.put("p/c", "1"); // 2
    s.put("p/a", "3"); // 3
    s.put("p/b", "2"); // 4
    s.put("p/a", "4"); // 5: p/a version 2
    s.put("q", "0"); // 6
    let (key, range_end) = prefix("p/");
    let base = RangeOp {
        key,
        range_end,
        ..RangeOp::default()
    };
    assert_eq!(s.keys(base.clone()), ["p/a", "p/b", "p/c"]);
    let limited = s
        .range(RangeOp {
            limit: 2,
            ..base.clone()
        })
        .unwrap();
    assert_eq!(
        (limited.kvs.len(), limited.more, limited.count),
        (2, true, 3)
    );
    let exact = s
        .range(RangeOp {
            limit: 3,
            ..base.clone()
        })
        .unwrap();
    assert!(!exact.more);
    let by = |order, target| RangeOp {
        sort_order: order,
        sort_target: target,
        ..base.clone()
    };
    assert_eq!(
        s.keys(by(SortOrder::Descend, SortTarget::Key)),
        ["p/c", "p/b", "p/a"]
    );
    // A target with no order sorts ascending.
    assert_eq!(
        s.keys(by(SortOrder::None, SortTarget::Mod)),
        ["p/c", "p/b", "p/a"]
    );
    assert_eq!(
        s.keys(by(SortOrder::Descend, SortTarget::Create)),
        ["p/b", "p/a", "p/c"]
    );
    assert_eq!(
        s.keys(by(SortOrder::Ascend, SortTarget::Value)),
        ["p/c", "p/b", "p/a"]
    );
    assert_eq!(
        s.keys(by(SortOrder::Descend, SortTarget::Version)),
        ["p/a", "p/b", "p/c"]
    );
    // Sorted, then limited: the newest-created key.
    let newest = s
        .range(RangeOp {
            limit: 1,
            ..by(SortOrder::Descend, SortTarget::Create)
        })
        .unwrap();
    assert_eq!((newest.kvs[0].key.clone(), newest.more), (b("p/b"), true));
    // Filters leave count alone.
    let filtered = s
        .range(RangeOp {
            min_mod_revision: 4,
            ..base.clone()
        })
        .unwrap();
    assert_eq!(filtered.kvs.len(), 2);
    assert_eq!(filtered.count, 3);
    let created_early = RangeOp {
        max_create_revision: 3,
        ..base.clone()
    };
    assert_eq!(s.keys(created_early), ["p/a", "p/c"]);
    let keys_only = s
        .range(RangeOp {
            keys_only: true,
            ..base.clone()
        })
        .unwrap();
    assert!(keys_only.kvs.iter().all(|kv| kv.value.is_empty()));
    let count_only = s
        .range(RangeOp {
            count_only: true,
            limit: 1,
            ..base.clone()
        })
        .unwrap();
    assert_eq!(
        (count_only.kvs.len(), count_only.count, count_only.more),
        (0, 3, false)
    );
    // From a key on ("\0" as the end), and nothing for an end before the key.
    let from = RangeOp {
        key: b("p/b"),
        range_end: b("\0"),
        ..RangeOp::default()
    };
    assert_eq!(s.keys(from), ["p/b", "p/c", "q"]);
    let backwards = RangeOp {
        key: b("q"),
        range_end: b("a"),
        ..RangeOp::default()
    };
    assert!(s.keys(backwards).is_empty());
}

#[test]
fn compaction_forgets_only_what_no_later_read_sees() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.put("a", "2"); // 3
    s.put("b", "1"); // 4
    s.delete("b", ""); // 5
    s.put("c", "1"); // 6
    s.delete("c", ""); // 7
    s.put("a", "3"); // 8
    assert_eq!(s.state.kv().footprint().0, 7);
    assert_eq!(
        s.run(KvCommand::Compact { revision: 7 }),
        Response::Kv(KvReply::Compacted { revision: 8 })
    );
    // a keeps its version at 7 ("2") and the later one; b is gone (deleted before 7); c keeps
    // its delete at 7, so a watch from 7 would still see it.
    assert_eq!(s.state.kv().footprint().0, 3);
    assert_eq!(s.get("a", 7).unwrap().value, b("2"));
    assert_eq!(s.get("a", 8).unwrap().value, b("3"));
    assert_eq!(s.get("b", 7), None);
    assert_eq!(s.get("a", 6), None);
    let at = |rev| RangeOp {
        key: b("a"),
        revision: rev,
        ..RangeOp::default()
    };
    assert_eq!(s.range(at(6)).unwrap_err(), KvError::Compacted);
    assert!(s.range(at(7)).is_ok());
    s.refused(KvCommand::Compact { revision: 7 }, KvError::Compacted);
    s.refused(KvCommand::Compact { revision: 9 }, KvError::FutureRevision);
    // A txn reading below the compaction is refused whole.
    s.refused(
        KvCommand::Txn(Txn {
            success: vec![put("z", "1"), RequestOp::Range(at(3))],
            ..Txn::default()
        }),
        KvError::Compacted,
    );
    s.run(KvCommand::Compact { revision: 8 });
    assert_eq!(s.state.kv().footprint().0, 1);
    assert_eq!(s.state.kv().footprint().1, 2);
}

#[test]
fn the_keyspace_survives_a_snapshot() {
    let mut s = Store::new();
    s.put("a", "1");
    s.put("bin\u{1}", "\u{0}\u{ff}");
    s.delete("a", "");
    s.put("a", "2");
    s.put("c", "3");
    s.run(KvCommand::Compact { revision: 3 });
    let bytes = s.state.to_snapshot_bytes();
    let restored = State::from_snapshot_bytes(&bytes).unwrap();
    assert_eq!(restored, s.state);
    assert_eq!(restored.to_snapshot_bytes(), bytes);
}

#[test]
fn a_snapshot_with_a_broken_keyspace_is_refused() {
    let mut s = Store::new();
    s.put("a", "1");
    s.put("a", "2");
    let text = String::from_utf8(s.state.to_snapshot_bytes()).unwrap();
    let later = text.replace("\"mod\":3", "\"mod\":9");
    assert!(State::from_snapshot_bytes(later.as_bytes())
        .unwrap_err()
        .contains("after revision 3"));
    let unordered = text.replace("\"mod\":2", "\"mod\":4");
    assert!(State::from_snapshot_bytes(unordered.as_bytes()).is_err());
}

#[test]
fn a_put_may_grow_the_state_and_a_delete_or_compaction_may_not() {
    assert!(KvCommand::Txn(Txn::of(put("a", "1"))).may_grow());
    let nested = Txn::of(RequestOp::Txn(Txn {
        failure: vec![put("a", "1")],
        ..Txn::default()
    }));
    assert!(KvCommand::Txn(nested).may_grow());
    let delete = RequestOp::Delete(DeleteOp {
        key: b("a"),
        ..DeleteOp::default()
    });
    assert!(!KvCommand::Txn(Txn::of(delete)).may_grow());
    assert!(!KvCommand::Compact { revision: 1 }.may_grow());
}

#[test]
fn a_command_reads_back_from_the_log_as_written() {
    let command = Command::Kv(KvCommand::Txn(Txn {
        compare: vec![compare(
            "k",
            CompareOp::Less,
            CompareTarget::Value(b("\u{0}x")),
        )],
        success: vec![put("k", "v")],
        failure: vec![get("k")],
    }));
    let json = serde_json::to_string(&command).unwrap();
    let back: Command = serde_json::from_str(&json).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), json);
    assert!(json.starts_with("{\"kv\":{\"txn\":"), "{json}");
}

fn leased(key: &str, lease: i64) -> RequestOp {
    RequestOp::Put(PutOp {
        key: b(key),
        value: b("v"),
        lease,
        ..PutOp::default()
    })
}

fn lease_keys(s: &Store, id: i64) -> Vec<Bytes> {
    s.state
        .kv()
        .leases()
        .get(id)
        .map(|l| l.keys.iter().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn a_lease_ends_on_cluster_time_with_its_keys_at_one_revision() {
    let mut s = Store::new();
    let grant = |s: &mut Store, at, id, ttl_ms| s.run_at(at, KvCommand::LeaseGrant { id, ttl_ms });
    // Picked ids are the same on every replica (from the log position), and positive.
    let Response::Kv(KvReply::Lease { id, ttl_ms, .. }) = grant(&mut s, 1_000, 0, 5_000) else {
        panic!("granted")
    };
    assert!(id > 0 && ttl_ms == 5_000);
    let mut replica = Store::new();
    assert_eq!(
        grant(&mut replica, 1_000, 0, 5_000),
        grant(&mut Store::new(), 1_000, 0, 5_000)
    );
    let Response::Kv(KvReply::Lease { id: next, .. }) = grant(&mut replica, 1_001, 0, 5_000) else {
        panic!("granted")
    };
    assert_ne!(next, id);
    assert_eq!(
        grant(&mut s, 1_001, id, 1_000),
        Response::Rejected(Rejection::Kv(KvError::LeaseExists))
    );
    s.txn(Txn {
        success: vec![leased("a", id), leased("b", id)],
        ..Txn::default()
    });
    assert_eq!(lease_keys(&s, id), [b("a"), b("b")]);
    // Kept alive at 4 s: it now ends at 9 s, not 6 s.
    s.run_at(4_000, KvCommand::LeaseKeepAlive { id });
    let expire = KvCommand::LeaseExpire {
        ids: vec![id],
        grace_ms: 0,
    };
    let before = s.state.revision();
    s.run_at(8_999, expire.clone());
    assert_eq!(s.state.revision(), before, "not yet: it ends at 9 s");
    assert_eq!(lease_keys(&s, id).len(), 2);
    let ended = s.run_at(9_000, expire);
    assert_eq!(
        ended,
        Response::Kv(KvReply::LeasesEnded {
            ids: vec![id],
            revision: before + 1
        })
    );
    assert!(s.state.kv().leases().get(id).is_none());
    assert_eq!(s.get("a", 0), None);
    let deletes: Vec<_> = s.effects.kv_events[s.effects.kv_events.len() - 2..]
        .iter()
        .map(|e| (e.kind, e.kv.mod_revision))
        .collect();
    assert_eq!(
        deletes,
        [
            (KvEventKind::Delete, before + 1),
            (KvEventKind::Delete, before + 1)
        ]
    );
    assert_eq!(
        s.run(KvCommand::LeaseKeepAlive { id }),
        Response::Rejected(Rejection::Kv(KvError::LeaseNotFound))
    );
}

#[test]
fn keep_alives_in_one_entry_refresh_each_lease_and_answer_the_missing_as_gone() {
    let mut s = Store::new();
    for (id, ttl_ms) in [(1, 2_000), (2, 5_000)] {
        s.run_at(1_000, KvCommand::LeaseGrant { id, ttl_ms });
    }
    let before = s.state.revision();
    let kept = s.run_at(
        3_000,
        KvCommand::LeaseKeepAlives {
            ids: vec![2, 9, 1, 2],
        },
    );
    assert_eq!(
        kept,
        Response::Kv(KvReply::LeasesKept {
            ttls_ms: vec![Some(5_000), None, Some(2_000), Some(5_000)],
            revision: before,
        })
    );
    assert_eq!(s.state.revision(), before, "a keep-alive writes no key");
    // Lease 1 now ends at 5 s (3 s + 2 s), not 3 s: a sweep at 4.999 s ends nothing.
    let expire = KvCommand::LeaseExpire {
        ids: vec![1, 2],
        grace_ms: 0,
    };
    s.run_at(4_999, expire.clone());
    assert!(s.state.kv().leases().get(1).is_some());
    let ended = s.run_at(5_000, expire);
    assert!(
        matches!(ended, Response::Kv(KvReply::LeasesEnded { ref ids, .. }) if ids == &[1]),
        "{ended:?}"
    );
    assert!(
        s.state.kv().leases().get(2).is_some(),
        "lease 2 ends at 8 s"
    );
}

#[test]
fn no_lease_expires_in_a_new_leaders_grace() {
    let mut s = Store::new();
    s.run_at(
        1_000,
        KvCommand::LeaseGrant {
            id: 7,
            ttl_ms: 1_000,
        },
    );
    // The term started at 1 s; with a grace of 5 s nothing ends before 6 s, though due at 2 s.
    let expire = KvCommand::LeaseExpire {
        ids: vec![7],
        grace_ms: 5_000,
    };
    s.run_at(5_999, expire.clone());
    assert!(s.state.kv().leases().contains(7));
    s.run_at(6_000, expire);
    assert!(!s.state.kv().leases().contains(7));
}

#[test]
fn keys_move_between_leases_and_leave_them_when_deleted_or_revoked() {
    let mut s = Store::new();
    s.run(KvCommand::LeaseGrant {
        id: 1,
        ttl_ms: 60_000,
    });
    s.run(KvCommand::LeaseGrant {
        id: 2,
        ttl_ms: 60_000,
    });
    s.txn(Txn::of(leased("k", 1)));
    s.txn(Txn::of(leased("j", 1)));
    // A put naming another lease moves the key; one keeping its lease keeps it.
    s.txn(Txn::of(leased("k", 2)));
    assert_eq!(
        (lease_keys(&s, 1), lease_keys(&s, 2)),
        (vec![b("j")], vec![b("k")])
    );
    s.txn(Txn::of(RequestOp::Put(PutOp {
        key: b("k"),
        value: b("kept"),
        ignore_lease: true,
        ..PutOp::default()
    })));
    assert_eq!(s.get("k", 0).unwrap().lease, 2);
    // A put with no lease detaches it.
    s.txn(Txn::of(put("j", "free")));
    assert!(lease_keys(&s, 1).is_empty());
    // A snapshot keeps leases and rebuilds their keys.
    let restored = State::from_snapshot_bytes(&s.state.to_snapshot_bytes()).unwrap();
    assert_eq!(restored, s.state);
    // Revoking deletes the keys; the other lease's keys stay.
    s.delete("k", "");
    assert!(lease_keys(&s, 2).is_empty());
    s.txn(Txn::of(leased("k", 2)));
    let revision = s.state.revision();
    assert_eq!(
        s.run(KvCommand::LeaseRevoke { id: 2 }),
        Response::Kv(KvReply::LeasesEnded {
            ids: vec![2],
            revision: revision + 1
        })
    );
    assert_eq!(s.get("k", 0), None);
    assert_eq!(s.get("j", 0).unwrap().value, b("free"));
    assert_eq!(
        s.run(KvCommand::LeaseRevoke { id: 2 }),
        Response::Rejected(Rejection::Kv(KvError::LeaseNotFound))
    );
    // A lease with no keys ends without a revision.
    let revision = s.state.revision();
    s.run(KvCommand::LeaseRevoke { id: 1 });
    assert_eq!(s.state.revision(), revision);
}

#[test]
fn prefix_end_is_the_first_key_past_the_prefix() {
    assert_eq!(super::prefix_end(b"/jepsen/lock/"), b("/jepsen/lock0"));
    assert_eq!(super::prefix_end(b"a\xff"), b("b"));
    assert_eq!(super::prefix_end(b"\xff\xff"), b("\0"));
    assert_eq!(super::prefix_end(b""), b("\0"));
}

/// A key written once holds room for one version, not the four a `Vec`'s first push makes; a
/// compacted history gives back what it no longer holds.
#[test]
fn histories_hold_no_more_room_than_their_versions_need() {
    let mut kv = KvStore::default();
    let key = b("k");
    kv.put(&key, b("v1"), 0, 2, 0);
    assert_eq!(kv.keys.get(key.as_ref()).map(|h| h.capacity()), Some(1));
    for rev in 3..=10 {
        kv.put(&key, b("v"), 0, rev, 0);
    }
    kv.compact(10);
    let history = kv
        .keys
        .get(key.as_ref())
        .expect("the newest version is kept");
    assert_eq!(history.len(), 1);
    assert!(history.capacity() <= 2, "capacity {}", history.capacity());
}
