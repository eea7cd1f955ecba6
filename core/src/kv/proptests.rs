//! Model-based: random puts, deletes, txns and compactions through `apply_effects`, against a
//! model that keeps a full copy of the keyspace at every revision. After each entry, every
//! revision from the compaction on must read exactly as the model's copy (values, create and mod
//! revisions, versions), and those before it must be refused.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::apply::apply_effects;
use crate::command::{Command, Response};
use crate::effects::{ApplyContext, Effects};
use crate::rejection::Rejection;
use crate::state::State;

#[derive(Clone, Debug)]
enum Step {
    Put(u8, u8),
    Delete(u8),
    /// Delete every key from this one on.
    DeleteFrom(u8),
    /// If key's mod revision equals the model's (or, when `stale`, one that is wrong), put
    /// both keys, else delete the first.
    Cas {
        key: u8,
        other: u8,
        stale: bool,
    },
    Compact(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6, any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
        1 => (0u8..6).prop_map(Step::Delete),
        1 => (0u8..6).prop_map(Step::DeleteFrom),
        2 => (0u8..6, 0u8..6, any::<bool>()).prop_map(|(key, other, stale)| Step::Cas { key, other, stale }),
        1 => any::<u8>().prop_map(Step::Compact),
    ]
}

/// key -> (value, create, mod, version)
type Snapshot = BTreeMap<u8, (u8, u64, u64, u64)>;

struct Model {
    /// The keyspace after each revision; [0] is the empty store.
    at: Vec<Snapshot>,
    compacted: u64,
}

impl Model {
    fn now(&self) -> &Snapshot {
        &self.at[self.at.len() - 1]
    }

    fn revision(&self) -> u64 {
        (self.at.len() - 1) as u64
    }

    /// Applies the writes of one revision (when they change anything).
    fn write(&mut self, puts: &[(u8, u8)], deletes: &[u8]) {
        let rev = (self.revision() + 1).max(2);
        let mut next = self.now().clone();
        let mut changed = false;
        for key in deletes {
            changed |= next.remove(key).is_some();
        }
        for &(key, value) in puts {
            let (create, version) = match next.get(&key) {
                Some(&(_, create, _, version)) => (create, version + 1),
                None => (rev, 1),
            };
            next.insert(key, (value, create, rev, version));
            changed = true;
        }
        if changed {
            // No keyspace write takes revision 1: the empty store keeps it, as etcd's does.
            if self.at.len() == 1 {
                self.at.push(Snapshot::new());
            }
            self.at.push(next);
        }
    }
}

fn key(k: u8) -> Bytes {
    Bytes::from(vec![b'k', b'0' + k])
}

fn put_op(k: u8, v: u8) -> RequestOp {
    RequestOp::Put(PutOp {
        key: key(k),
        value: Bytes::from(vec![v]),
        ..PutOp::default()
    })
}

fn delete_op(k: u8, from: bool) -> RequestOp {
    RequestOp::Delete(DeleteOp {
        key: key(k),
        range_end: if from {
            Bytes::from_static(b"\0")
        } else {
            Bytes::new()
        },
        prev_kv: false,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_revision_since_the_compaction_reads_as_the_model(steps in prop::collection::vec(step(), 1..60)) {
        let mut state = State::new();
        let mut effects = Effects::default();
        let mut model = Model { at: vec![Snapshot::new()], compacted: 0 };
        for (i, step) in steps.iter().enumerate() {
            let ctx = ApplyContext {
                log_index: i as u64 + 1,
                term: 1,
                time_ms: 1,
                stamped: true,
                wall_ms: None,
            };
            let command = match step {
                Step::Put(k, v) => {
                    model.write(&[(*k, *v)], &[]);
                    KvCommand::Txn(Txn::of(put_op(*k, *v)))
                }
                Step::Delete(k) => {
                    model.write(&[], &[*k]);
                    KvCommand::Txn(Txn::of(delete_op(*k, false)))
                }
                Step::DeleteFrom(k) => {
                    let gone: Vec<u8> = model.now().keys().copied().filter(|x| x >= k).collect();
                    model.write(&[], &gone);
                    KvCommand::Txn(Txn::of(delete_op(*k, true)))
                }
                Step::Cas { key: k, other, stale } => {
                    let modded = model.now().get(k).map_or(0, |e| e.2);
                    let expected = if *stale { modded + 1 } else { modded };
                    let holds = expected == modded;
                    let value = i as u8;
                    if holds {
                        let mut puts = vec![(*k, value)];
                        if other != k {
                            puts.push((*other, value));
                        }
                        model.write(&puts, &[]);
                    } else {
                        model.write(&[], &[*k]);
                    }
                    let mut success = vec![put_op(*k, value)];
                    if other != k {
                        success.push(put_op(*other, value));
                    }
                    KvCommand::Txn(Txn {
                        compare: vec![Compare {
                            key: key(*k),
                            range_end: Bytes::new(),
                            op: CompareOp::Equal,
                            target: CompareTarget::Mod(expected as i64),
                        }],
                        success,
                        failure: vec![delete_op(*k, false)],
                    })
                }
                Step::Compact(r) => {
                    let rev = u64::from(*r) % (model.revision() + 2);
                    if rev > model.compacted && rev <= model.revision() {
                        model.compacted = rev;
                    }
                    KvCommand::Compact { revision: rev }
                }
            };
            let response = apply_effects(&mut state, &ctx, &Command::Kv(command), &mut effects);
            if let Response::Rejected(rejection) = &response {
                let compaction = matches!(step, Step::Compact(_));
                prop_assert!(
                    compaction && matches!(rejection, Rejection::Kv(KvError::Compacted | KvError::FutureRevision)),
                    "{step:?}: {rejection}"
                );
            }
            prop_assert_eq!(state.revision(), model.revision());
            prop_assert_eq!(state.kv().compacted(), model.compacted);
            for rev in 0..=model.revision() + 1 {
                let all = RangeOp {
                    key: Bytes::from_static(b"\0"),
                    range_end: Bytes::from_static(b"\0"),
                    revision: rev,
                    ..RangeOp::default()
                };
                let read = state.kv().range(&all, state.revision());
                if rev > model.revision() {
                    prop_assert_eq!(read.unwrap_err(), KvError::FutureRevision);
                    continue;
                }
                if rev != 0 && rev < model.compacted {
                    prop_assert_eq!(read.unwrap_err(), KvError::Compacted);
                    continue;
                }
                let want = &model.at[if rev == 0 { model.at.len() - 1 } else { rev as usize }];
                let got: Snapshot = read
                    .unwrap()
                    .kvs
                    .iter()
                    .map(|kv| (kv.key[1] - b'0', (kv.value[0], kv.create_revision, kv.mod_revision, kv.version)))
                    .collect();
                prop_assert_eq!(&got, want, "revision {}", rev);
            }
        }
        // A watch from after the compaction replays exactly the events apply emitted, in
        // order, whole or in chunks of whole revisions.
        let all = Span::From(Bytes::from_static(b"\0"));
        let from = state.kv().compacted() + 1;
        let emitted: Vec<&KvEvent> = effects.kv_events.iter().filter(|e| e.kv.mod_revision >= from).collect();
        let (replay, through) = state.kv().changes(&all, from, state.revision(), usize::MAX).unwrap();
        prop_assert_eq!(through, state.revision());
        prop_assert_eq!(replay.iter().collect::<Vec<_>>(), emitted.clone());
        let mut chunked = Vec::new();
        let mut next = from;
        while next <= state.revision() {
            let (chunk, through) = state.kv().changes(&all, next, state.revision(), 2).unwrap();
            prop_assert!(through >= next);
            chunked.extend(chunk);
            next = through + 1;
        }
        prop_assert_eq!(chunked.iter().collect::<Vec<_>>(), emitted);
        if state.kv().compacted() > 1 {
            prop_assert_eq!(
                state.kv().changes(&all, state.kv().compacted() - 1, state.revision(), 10).unwrap_err(),
                KvError::Compacted
            );
        }
        let restored = State::from_snapshot_bytes(&state.to_snapshot_bytes());
        prop_assert_eq!(restored.as_ref(), Ok(&state));
    }
}
