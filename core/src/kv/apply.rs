//! The one place the keyspace changes: a txn (puts and deletes alone are txns of one request) or
//! a compaction, as etcd applies them.
//!
//! A txn is decided in full before anything is written, as etcd does: every compare, nested
//! txns' included, is evaluated on the store as it was before the txn, and every request of the
//! branches that will run is checked (a lease that must exist, a key `ignore_value` needs, a
//! revision a range reads at); a refusal leaves the store as it was. Then the requests run in
//! order, all at one revision, each change numbered (`sub`) in that order; a range after a write
//! of the same txn sees the write.

use crate::command::Response;
use crate::effects::ApplyContext;
use crate::rejection::Rejection;
use crate::state::State;

use super::command::{
    Compare, CompareOp, CompareTarget, DeleteOp, KvCommand, KvError, KvReply, OpResult, PutOp,
    RequestOp, Txn, TxnResult,
};
use super::{KeyValue, KvEvent, KvEventKind, KvStore, Span};

/// Applies a keyspace command; pushes one `KvEvent` per key changed, in order.
pub(crate) fn apply(
    state: &mut State,
    ctx: &ApplyContext,
    command: &KvCommand,
    events: &mut Vec<KvEvent>,
) -> Response {
    let result = match command {
        KvCommand::Txn(txn) => txn_apply(state, txn, events).map(KvReply::Txn),
        KvCommand::Compact { revision } => compact(state, *revision),
        KvCommand::LeaseGrant { id, ttl_ms } => grant(state, ctx, *id, *ttl_ms),
        KvCommand::LeaseKeepAlive { id } => {
            let now = state.time_ms;
            match state.kv.leases.refresh(*id, now) {
                Some(ttl_ms) => Ok(KvReply::Lease {
                    id: *id,
                    ttl_ms,
                    revision: state.revision,
                }),
                None => Err(KvError::LeaseNotFound),
            }
        }
        KvCommand::LeaseKeepAlives { ids } => {
            let now = state.time_ms;
            let leases = &mut state.kv.leases;
            let ttls_ms = ids.iter().map(|id| leases.refresh(*id, now)).collect();
            Ok(KvReply::LeasesKept {
                ttls_ms,
                revision: state.revision,
            })
        }
        KvCommand::LeaseRevoke { id } => match state.kv.leases.contains(*id) {
            true => Ok(end_leases(state, &[*id], events)),
            false => Err(KvError::LeaseNotFound),
        },
        KvCommand::LeaseExpire { ids, grace_ms } => {
            let now = state.time_ms;
            let past_grace = state
                .term_started_ms
                .is_some_and(|started| now >= started.saturating_add(*grace_ms));
            let due: Vec<i64> = match past_grace {
                true => ids
                    .iter()
                    .copied()
                    .filter(|id| {
                        state
                            .kv
                            .leases
                            .get(*id)
                            .is_some_and(|l| l.expires_ms <= now)
                    })
                    .collect(),
                false => Vec::new(),
            };
            Ok(end_leases(state, &due, events))
        }
    };
    result.map_or_else(|e| Response::Rejected(Rejection::Kv(e)), Response::Kv)
}

/// A lease of `ttl_ms` from the entry's cluster time; `id` 0: one picked from the entry's log
/// position. etcd's TTL ceiling is the server's to check (it is in seconds there).
fn grant(state: &mut State, ctx: &ApplyContext, id: i64, ttl_ms: u64) -> Result<KvReply, KvError> {
    if id < 0 {
        return Err(KvError::LeaseNotFound);
    }
    if ttl_ms > (super::lease::LEASE_TTL_S_MAX as u64).saturating_mul(1000) {
        return Err(KvError::LeaseTtlTooLarge);
    }
    let leases = &mut state.kv.leases;
    let id = match id {
        0 => leases.pick_id(ctx.log_index, ctx.term),
        id if leases.contains(id) => return Err(KvError::LeaseExists),
        id => id,
    };
    leases.grant(id, ttl_ms, state.time_ms);
    Ok(KvReply::Lease {
        id,
        ttl_ms,
        revision: state.revision,
    })
}

/// Ends `ids` (each an existing lease): their keys are deleted, all at one new revision (none
/// when they had no keys).
fn end_leases(state: &mut State, ids: &[i64], events: &mut Vec<KvEvent>) -> KvReply {
    let current = state.revision;
    let mut run = Run {
        kv: &mut state.kv,
        current,
        changes: 0,
        events,
    };
    for id in ids {
        let Some(lease) = run.kv.leases.remove(*id) else {
            continue;
        };
        for key in lease.keys {
            run.delete(&DeleteOp {
                key,
                range_end: super::Bytes::new(),
                prev_kv: false,
            });
        }
    }
    if run.changes > 0 {
        state.revision = write_revision(current);
    }
    KvReply::LeasesEnded {
        ids: ids.to_vec(),
        revision: state.revision,
    }
}

fn compact(state: &mut State, revision: u64) -> Result<KvReply, KvError> {
    if revision <= state.kv.compacted {
        return Err(KvError::Compacted);
    }
    if revision > state.revision {
        return Err(KvError::FutureRevision);
    }
    state.kv.compact(revision);
    Ok(KvReply::Compacted {
        revision: state.revision,
    })
}

fn txn_apply(
    state: &mut State,
    txn: &Txn,
    events: &mut Vec<KvEvent>,
) -> Result<TxnResult, KvError> {
    // The request limit is admission's (a node's config); the rules are apply's too.
    txn.check(usize::MAX)?;
    let current = state.revision;
    let path = Path::decide(&state.kv, txn);
    path.check(&state.kv, current, txn)?;
    let mut run = Run {
        kv: &mut state.kv,
        current,
        changes: 0,
        events,
    };
    let mut result = run.txn(txn, &path);
    if run.changes > 0 {
        state.revision = write_revision(current);
    }
    result.set_revision(state.revision);
    Ok(result)
}

/// A txn that writes nothing (`Txn::writes` is false), answered from the store at `current`
/// without the log, as etcd answers read-only txns: the same decision and checks as
/// `txn_apply`, on a copy of the store (O(1): nothing is written to it).
pub fn read_txn(kv: &KvStore, current: u64, txn: &Txn) -> Result<TxnResult, KvError> {
    txn.check(usize::MAX)?;
    let path = Path::decide(kv, txn);
    path.check(kv, current, txn)?;
    let mut scratch = kv.clone();
    let mut events = Vec::new();
    let mut run = Run {
        kv: &mut scratch,
        current,
        changes: 0,
        events: &mut events,
    };
    let mut result = run.txn(txn, &path);
    result.set_revision(current);
    Ok(result)
}

/// The revision a keyspace write takes in a store at `current`: the next, except that none
/// takes revision 1. etcd's store starts at revision 1 with nothing in it, so its first write is
/// at 2, and clientv3's concurrency package relies on that: it waits for the keys created before
/// its own at revision R by reading `max_create_revision = R - 1`, where 0 means "no bound".
pub fn write_revision(current: u64) -> u64 {
    (current + 1).max(2)
}

/// Which branch each txn that runs takes: the outer one, and the nested txns of the branch it
/// takes, in order.
struct Path {
    succeeded: bool,
    nested: Vec<Path>,
}

impl Path {
    /// Evaluated on the store before the txn, as etcd does.
    fn decide(kv: &KvStore, txn: &Txn) -> Path {
        let succeeded = txn.compare.iter().all(|c| holds(kv, c));
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let nested = branch
            .iter()
            .filter_map(|op| match op {
                RequestOp::Txn(t) => Some(Path::decide(kv, t)),
                _ => None,
            })
            .collect();
        Path { succeeded, nested }
    }

    fn branch<'t>(&self, txn: &'t Txn) -> &'t [RequestOp] {
        if self.succeeded {
            &txn.success
        } else {
            &txn.failure
        }
    }

    /// The requests that will run, checked against the store before the txn.
    fn check(&self, kv: &KvStore, current: u64, txn: &Txn) -> Result<(), KvError> {
        let mut nested = self.nested.iter();
        for op in self.branch(txn) {
            match op {
                RequestOp::Range(r) => {
                    kv.read_revision(r.revision, current)?;
                }
                RequestOp::Put(p) => check_put(kv, p)?,
                RequestOp::Delete(_) => {}
                RequestOp::Txn(t) => {
                    if let Some(path) = nested.next() {
                        path.check(kv, current, t)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A put's lease must exist, and the key must exist when the put keeps its value or lease.
fn check_put(kv: &KvStore, put: &PutOp) -> Result<(), KvError> {
    if put.lease != 0 && !kv.leases.contains(put.lease) {
        return Err(KvError::LeaseNotFound);
    }
    let keeps = put.ignore_value || put.ignore_lease;
    if keeps && kv.live_in(&Span::One(put.key.clone())).is_empty() {
        return Err(KvError::KeyNotFound);
    }
    Ok(())
}

/// etcd's compare: every key of the range must pass; with no key, version, revisions and lease
/// compare as 0 and a value compare fails (a missing value is not the empty one).
fn holds(kv: &KvStore, compare: &Compare) -> bool {
    let kvs = kv.live_in(&Span::new(&compare.key, &compare.range_end));
    if kvs.is_empty() {
        if matches!(compare.target, CompareTarget::Value(_)) {
            return false;
        }
        return passes(compare, &KeyValue::missing());
    }
    kvs.iter().all(|kv| passes(compare, kv))
}

fn passes(compare: &Compare, kv: &KeyValue) -> bool {
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let order = match &compare.target {
        CompareTarget::Version(v) => signed(kv.version).cmp(v),
        CompareTarget::Create(v) => signed(kv.create_revision).cmp(v),
        CompareTarget::Mod(v) => signed(kv.mod_revision).cmp(v),
        CompareTarget::Lease(v) => kv.lease.cmp(v),
        CompareTarget::Value(v) => kv.value.as_ref().cmp(v.as_ref()),
    };
    match compare.op {
        CompareOp::Equal => order.is_eq(),
        CompareOp::NotEqual => order.is_ne(),
        CompareOp::Greater => order.is_gt(),
        CompareOp::Less => order.is_lt(),
    }
}

impl KeyValue {
    /// What a compare sees of a key that does not exist.
    fn missing() -> KeyValue {
        KeyValue {
            key: super::Bytes::new(),
            create_revision: 0,
            mod_revision: 0,
            version: 0,
            value: super::Bytes::new(),
            lease: 0,
        }
    }
}

/// A txn running: everything it writes is at `write_revision(current)`.
struct Run<'a> {
    kv: &'a mut KvStore,
    current: u64,
    changes: u32,
    events: &'a mut Vec<KvEvent>,
}

impl Run<'_> {
    fn txn(&mut self, txn: &Txn, path: &Path) -> TxnResult {
        let mut nested = path.nested.iter();
        let mut responses = Vec::new();
        for op in path.branch(txn) {
            let response = match op {
                RequestOp::Range(r) => {
                    // Reads see this txn's own writes once it has made any.
                    let newest = match self.changes {
                        0 => self.current,
                        _ => write_revision(self.current),
                    };
                    // Checked before the txn ran: it cannot fail now.
                    OpResult::Range(self.kv.range(r, newest).unwrap_or_default())
                }
                RequestOp::Put(p) => self.put(p),
                RequestOp::Delete(d) => self.delete(d),
                RequestOp::Txn(t) => match nested.next() {
                    Some(path) => OpResult::Txn(self.txn(t, path)),
                    None => OpResult::Txn(TxnResult {
                        succeeded: false,
                        responses: Vec::new(),
                        revision: 0,
                    }),
                },
            };
            responses.push(response);
        }
        TxnResult {
            succeeded: path.succeeded,
            responses,
            revision: 0,
        }
    }

    fn put(&mut self, put: &PutOp) -> OpResult {
        let rev = write_revision(self.current);
        // What the put keeps of the key's current version, looked up only when it keeps any.
        let now = if put.ignore_value || put.ignore_lease {
            self.kv.get_at(&put.key, u64::MAX)
        } else {
            None
        };
        let value = match (&now, put.ignore_value) {
            (Some(now), true) => now.value.clone(),
            _ => put.value.clone(),
        };
        let lease = match (&now, put.ignore_lease) {
            (Some(now), true) => now.lease,
            _ => put.lease,
        };
        let prev = self
            .kv
            .put(&put.key, value.clone(), lease, rev, self.changes);
        let kv = KeyValue {
            key: put.key.clone(),
            create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
            mod_revision: rev,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value,
            lease,
        };
        self.changes += 1;
        self.events.push(KvEvent {
            kind: KvEventKind::Put,
            kv,
            prev: prev.clone(),
        });
        OpResult::Put {
            prev_kv: prev.filter(|_| put.prev_kv),
        }
    }

    fn delete(&mut self, delete: &DeleteOp) -> OpResult {
        let rev = write_revision(self.current);
        let span = Span::new(&delete.key, &delete.range_end);
        let alive = self.kv.live_in(&span);
        let deleted = alive.len() as u64;
        for prev in &alive {
            self.kv.delete(&prev.key, rev, self.changes);
            self.changes += 1;
            self.events.push(KvEvent {
                kind: KvEventKind::Delete,
                kv: KeyValue {
                    mod_revision: rev,
                    ..KeyValue::missing().with_key(&prev.key)
                },
                prev: Some(prev.clone()),
            });
        }
        OpResult::Delete {
            deleted,
            prev_kvs: if delete.prev_kv { alive } else { Vec::new() },
        }
    }
}

impl KeyValue {
    fn with_key(mut self, key: &super::Bytes) -> KeyValue {
        self.key = key.clone();
        self
    }
}

impl TxnResult {
    /// The store revision after the txn, on it and on every txn nested in it.
    fn set_revision(&mut self, revision: u64) {
        self.revision = revision;
        for response in &mut self.responses {
            if let OpResult::Txn(nested) = response {
                nested.set_revision(revision);
            }
        }
    }
}
