//! `kv`: etcd's multi-version keyspace, on the replicated state (README "Use steward as etcd").
//!
//! Byte keys with etcd's semantics: every key has a create revision, a mod revision, a version
//! (changes since it was created, reset by a delete) and a lease. Revisions are the store's own
//! (`State::revision`), shared with the typed objects: every applied entry that changes
//! something takes the next one, and a txn, however many keys it changes, takes one.
//!
//! Every version is kept, deletes as tombstones, until a compaction at revision C forgets what
//! no read at C or later can see: of each key's versions at or before C only the newest stays,
//! and not even that when it is a delete older than C. Reads at any revision from C on see the
//! store exactly as it was ("MVCC"); older ones are refused (`KvError::Compacted`).
//!
//! - `command`: what clients ask (`KvCommand`: a txn, or a compaction; a put or delete is a txn
//!   of one), the replies, the refusals with etcd's own words (`KvError`), and the checks every
//!   request passes before it is proposed (`Txn::check`).
//! - `apply`: the one place the keyspace changes.
//! - here: the store (`KvStore`), its reads (`range`), and the events watchers get.

pub mod apply;
mod b64;
pub mod command;
pub mod lease;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

pub use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use command::{
    Compare, CompareOp, CompareTarget, DeleteOp, KvCommand, KvError, KvReply, OpResult, PutOp,
    RangeOp, RangeResult, RequestOp, SortOrder, SortTarget, Txn, TxnResult,
};

/// A key as a client names it: any non-empty bytes.
pub type Key = Bytes;

/// A key's value as a client reads it: etcd's `mvccpb.KeyValue`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    #[serde(with = "b64")]
    pub key: Key,
    pub create_revision: u64,
    pub mod_revision: u64,
    pub version: u64,
    #[serde(with = "b64")]
    pub value: Bytes,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lease: i64,
}

/// `kv::b64` for the snapshot's keys.
pub(crate) fn b64_serialize<S: serde::Serializer>(bytes: &&Bytes, s: S) -> Result<S::Ok, S::Error> {
    b64::serialize(bytes, s)
}

pub(crate) fn b64_deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    b64::deserialize(d)
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// One version of a key in its history: a value, or a delete (a tombstone).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Version {
    /// The revision that wrote it.
    #[serde(rename = "mod")]
    pub(crate) mod_revision: u64,
    /// Its place among the changes of that revision (a txn's changes, in order).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) sub: u32,
    /// The revision the key was created at; 0 for a tombstone.
    #[serde(rename = "create", default, skip_serializing_if = "is_zero")]
    pub(crate) create_revision: u64,
    /// 1 when created, +1 per put after; 0 for a tombstone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) version: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) lease: i64,
    /// `None`: the key was deleted at `mod_revision`.
    #[serde(default, with = "b64::option", skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<Bytes>,
}

impl Version {
    fn live(&self) -> bool {
        self.value.is_some()
    }

    fn to_kv(&self, key: &Key) -> KeyValue {
        KeyValue {
            key: key.clone(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            value: self.value.clone().unwrap_or_default(),
            lease: self.lease,
        }
    }

    fn bytes(&self, key: &Key) -> u64 {
        (key.len() + self.value.as_ref().map_or(0, Bytes::len)) as u64
    }
}

/// A key's versions, oldest first (ascending `mod_revision`, at most one per revision).
pub(crate) type History = Vec<Version>;

/// What happened to one key, for watchers (etcd's `mvccpb.Event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEvent {
    pub kind: KvEventKind,
    /// A put: the key as written. A delete: the key, and the revision it was deleted at.
    pub kv: KeyValue,
    /// The key before the change; `None` when it did not exist.
    pub prev: Option<KeyValue>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvEventKind {
    Put,
    Delete,
}

/// The `range_end` of every key that starts with `prefix` (etcd's prefix range, as clientv3's
/// `WithPrefix` makes it): the prefix with its last byte incremented, trailing 0xff bytes
/// dropped; all 0xff (or empty): `"\0"`, every key from the prefix on.
pub fn prefix_end(prefix: &[u8]) -> Bytes {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Bytes::from(end);
        }
    }
    Bytes::from_static(b"\0")
}

/// Which keys a request names: etcd's `key` with `range_end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Span {
    /// `range_end` empty: the key alone.
    One(Key),
    /// `range_end` is "\0": every key >= this one.
    From(Key),
    /// `[key, range_end)`; nothing when `range_end <= key`.
    Between(Key, Key),
}

impl Span {
    /// The keys etcd's `key` and `range_end` name.
    pub fn new(key: &Bytes, range_end: &Bytes) -> Span {
        match range_end.as_ref() {
            [] => Span::One(key.clone()),
            [0] => Span::From(key.clone()),
            _ => Span::Between(key.clone(), range_end.clone()),
        }
    }

    /// Whether `key` is one of them.
    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            Span::One(k) => k.as_ref() == key,
            Span::From(from) => key >= from.as_ref(),
            Span::Between(from, end) => key >= from.as_ref() && key < end.as_ref(),
        }
    }
}

/// The multi-version keyspace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KvStore {
    /// Every key with a version kept, in key order. Persistent, like the objects: a snapshot
    /// clone is O(1), and a history is copied only when written while a snapshot shares it.
    pub(crate) keys: imbl::OrdMap<Key, Arc<History>>,
    /// The revision of the last compaction; reads below it are refused.
    pub(crate) compacted: u64,
    /// Versions kept, tombstones included (what compaction frees), and the bytes of their keys
    /// and values.
    pub(crate) versions: u64,
    pub(crate) bytes: u64,
    /// etcd's leases, with the keys attached to each.
    pub(crate) leases: lease::LeaseTable,
}

impl KvStore {
    /// The leases.
    pub fn leases(&self) -> &lease::LeaseTable {
        &self.leases
    }

    /// The revision of the last compaction (0: none).
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Versions kept (tombstones included) and the bytes of their keys and values: what memory
    /// and snapshots hold for the keyspace, and what compaction frees.
    pub fn footprint(&self) -> (u64, u64) {
        (self.versions, self.bytes)
    }

    /// The revision a read asking for `asked` (0: the newest) sees, given the store's `current`.
    pub fn read_revision(&self, asked: u64, current: u64) -> Result<u64, KvError> {
        match asked {
            0 => Ok(current),
            rev if rev > current => Err(KvError::FutureRevision),
            rev if rev < self.compacted => Err(KvError::Compacted),
            rev => Ok(rev),
        }
    }

    /// The key's live version at `rev`, if it had one.
    pub fn get_at(&self, key: &[u8], rev: u64) -> Option<KeyValue> {
        let (key, history) = self.keys.get_key_value(key)?;
        version_at(history, rev).map(|v| v.to_kv(key))
    }

    /// etcd's Range at the store revision `current`: the keys of `op`'s span alive at its
    /// revision, filtered, sorted and limited as etcd does; `count` is every key of the span.
    pub fn range(&self, op: &RangeOp, current: u64) -> Result<RangeResult, KvError> {
        let rev = self.read_revision(op.revision, current)?;
        let span = Span::new(&op.key, &op.range_end);
        let sorted = op.sort_order != SortOrder::None || op.sort_target != SortTarget::Key;
        let filtered = op.min_mod_revision != 0
            || op.max_mod_revision != 0
            || op.min_create_revision != 0
            || op.max_create_revision != 0;
        // Without sorting or filters the first `limit` keys are the answer: no need to copy the
        // others, only to count them.
        let take = match op.limit {
            limit if limit > 0 && !sorted && !filtered => limit,
            _ => u64::MAX,
        };
        let mut count = 0u64;
        let mut kvs = Vec::new();
        for (key, history) in self.span_iter(&span) {
            let Some(version) = version_at(history, rev) else {
                continue;
            };
            count += 1;
            if op.count_only || (kvs.len() as u64) >= take || !op.admits(version) {
                continue;
            }
            let mut kv = version.to_kv(key);
            if op.keys_only {
                kv.value = Bytes::new();
            }
            kvs.push(kv);
        }
        if sorted {
            sort_kvs(&mut kvs, op.sort_order, op.sort_target);
        }
        let more = match op.limit {
            _ if op.count_only => false,
            limit if limit > 0 && (kvs.len() as u64) > limit => {
                kvs.truncate(limit as usize);
                true
            }
            limit if limit > 0 && take != u64::MAX => count > limit,
            _ => false,
        };
        Ok(RangeResult { kvs, more, count })
    }

    /// The keys of `span` with their histories, in key order.
    pub(crate) fn span_iter<'a>(
        &'a self,
        span: &Span,
    ) -> Box<dyn Iterator<Item = (&'a Key, &'a Arc<History>)> + 'a> {
        match span {
            Span::One(key) => Box::new(self.keys.get_key_value(key.as_ref()).into_iter()),
            Span::From(from) => Box::new(
                self.keys
                    .range::<_, [u8]>((Bound::Included(from.as_ref()), Bound::Unbounded)),
            ),
            Span::Between(from, end) if end > from => Box::new(self.keys.range::<_, [u8]>((
                Bound::Included(from.as_ref()),
                Bound::Excluded(end.as_ref()),
            ))),
            Span::Between(..) => Box::new(std::iter::empty()),
        }
    }

    /// The changes to the keys of `span` at revisions `from..=to`, in the order they were made,
    /// each with the version before it (`None` if the key did not exist, or if that version was
    /// compacted away): what a watch from `from` replays. At most about `max` events: the answer
    /// stops at the end of a revision once it holds `max` or more, and says which revision it
    /// covers up to (`to`, unless it stopped early). `Err(Compacted)` when `from` is below the
    /// compaction: those changes are gone.
    pub fn changes(
        &self,
        span: &Span,
        from: u64,
        to: u64,
        max: usize,
    ) -> Result<(Vec<KvEvent>, u64), KvError> {
        if from < self.compacted {
            return Err(KvError::Compacted);
        }
        let mut found: Vec<(u64, u32, KvEvent)> = Vec::new();
        for (key, history) in self.span_iter(span) {
            let first = history.partition_point(|v| v.mod_revision < from);
            for i in first..history.len() {
                let Some(v) = history.get(i).filter(|v| v.mod_revision <= to) else {
                    break;
                };
                let prev = i
                    .checked_sub(1)
                    .and_then(|p| history.get(p))
                    .filter(|p| p.live())
                    .map(|p| p.to_kv(key));
                let kind = match v.live() {
                    true => KvEventKind::Put,
                    false => KvEventKind::Delete,
                };
                let kv = v.to_kv(key);
                found.push((v.mod_revision, v.sub, KvEvent { kind, kv, prev }));
            }
        }
        found.sort_by_key(|(rev, sub, _)| (*rev, *sub));
        let mut through = to;
        if found.len() > max {
            // Whole revisions only: cut after the revision of the `max`th event.
            let last = found.get(max.saturating_sub(1)).map_or(to, |e| e.0);
            found.retain(|e| e.0 <= last);
            through = last;
        }
        Ok((found.into_iter().map(|(_, _, e)| e).collect(), through))
    }

    /// Feeds `out` every kept version written at or before `rev`, key by key, in a fixed
    /// layout: what etcd's HashKV hashes, so members that applied the same log agree.
    pub fn feed_versions(&self, rev: u64, mut out: impl FnMut(&[u8])) {
        for (key, history) in self.keys.iter() {
            let upto = history.partition_point(|v| v.mod_revision <= rev);
            let Some(kept) = history.get(..upto).filter(|h| !h.is_empty()) else {
                continue;
            };
            out(&(key.len() as u64).to_le_bytes());
            out(key);
            for v in kept {
                out(&v.mod_revision.to_le_bytes());
                out(&v.sub.to_le_bytes());
                out(&v.create_revision.to_le_bytes());
                out(&v.version.to_le_bytes());
                out(&v.lease.to_le_bytes());
                match &v.value {
                    Some(value) => {
                        out(&[1]);
                        out(&(value.len() as u64).to_le_bytes());
                        out(value);
                    }
                    None => out(&[0]),
                }
            }
        }
    }

    /// The keys of `span` alive now, with their newest versions.
    pub(crate) fn live_in(&self, span: &Span) -> Vec<KeyValue> {
        self.span_iter(span)
            .filter_map(|(key, history)| latest(history).map(|v| v.to_kv(key)))
            .collect()
    }

    /// Writes `key` at revision `rev` (change `sub` of it); returns the version it replaced.
    pub(crate) fn put(
        &mut self,
        key: &Key,
        value: Bytes,
        lease: i64,
        rev: u64,
        sub: u32,
    ) -> Option<KeyValue> {
        // One lookup: the entry gives both the version replaced and the place of the new one.
        let history = self.keys.entry(key.clone()).or_insert_with(new_history);
        let prev = latest(history).map(|v| v.to_kv(key));
        let version = Version {
            mod_revision: rev,
            sub,
            create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            lease,
            value: Some(value),
        };
        self.versions += 1;
        self.bytes += version.bytes(key);
        Arc::make_mut(history).push(version);
        if let Some(p) = prev.as_ref().filter(|p| p.lease != 0 && p.lease != lease) {
            self.leases.detach(p.lease, key);
        }
        if lease != 0 {
            self.leases.attach(lease, key);
        }
        prev
    }

    /// Deletes `key` at revision `rev` if it is alive; returns the version deleted.
    pub(crate) fn delete(&mut self, key: &Key, rev: u64, sub: u32) -> Option<KeyValue> {
        let prev = latest(self.keys.get(key.as_ref())?)?.to_kv(key);
        if prev.lease != 0 {
            self.leases.detach(prev.lease, key);
        }
        let tombstone = Version {
            mod_revision: rev,
            sub,
            create_revision: 0,
            version: 0,
            lease: 0,
            value: None,
        };
        self.push(key, tombstone);
        Some(prev)
    }

    fn push(&mut self, key: &Key, version: Version) {
        self.versions += 1;
        self.bytes += version.bytes(key);
        let history = self.keys.entry(key.clone()).or_insert_with(new_history);
        Arc::make_mut(history).push(version);
    }

    /// Forgets what no read at `rev` or later can see (see the module doc). The caller checked
    /// `compacted < rev <= current`.
    pub(crate) fn compact(&mut self, rev: u64) {
        self.compacted = rev;
        let stale: Vec<Key> = self
            .keys
            .iter()
            .filter(|(_, history)| keep_from(history, rev) > 0)
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            let Some(history) = self.keys.get_mut(key.as_ref()) else {
                continue;
            };
            let history = Arc::make_mut(history);
            let drop = keep_from(history, rev);
            for gone in history.drain(..drop) {
                self.versions -= 1;
                self.bytes -= gone.bytes(&key);
            }
            if history.is_empty() {
                self.keys.remove(key.as_ref());
            } else if history.capacity() > 2 * history.len() {
                history.shrink_to_fit();
            }
        }
    }

    /// Every key with its kept versions, in key order: the snapshot body.
    pub(crate) fn histories(&self) -> impl Iterator<Item = (&Key, &History)> {
        self.keys.iter().map(|(k, h)| (k, &**h))
    }

    /// Rebuilds the store from a snapshot's histories and leases; each key whose newest
    /// version names a lease is attached to it again.
    pub(crate) fn restore(
        compacted: u64,
        histories: Vec<(Key, History)>,
        leases: Vec<lease::Lease>,
    ) -> KvStore {
        let mut store = KvStore {
            compacted,
            leases: lease::LeaseTable::restore(leases),
            ..KvStore::default()
        };
        for (key, mut history) in histories {
            for version in &history {
                store.versions += 1;
                store.bytes += version.bytes(&key);
            }
            if let Some(v) = latest(&history).filter(|v| v.lease != 0) {
                store.leases.attach(v.lease, &key);
            }
            history.shrink_to_fit();
            store.keys.insert(key, Arc::new(history));
        }
        store
    }
}

/// A new key's history, with room for its first version only. Most keys keep one version until
/// they are written again, and a `Vec`'s first push makes room for four: 288 bytes where 72 do,
/// more than the half-kilobyte value beside them is worth halving (RSS after 57k etcd-API
/// creates on 3 nodes: see README, Benchmark).
fn new_history() -> Arc<History> {
    Arc::new(Vec::with_capacity(1))
}

impl RangeOp {
    /// Whether the version passes the request's min/max revision filters.
    fn admits(&self, v: &Version) -> bool {
        let above = |n: u64, min: u64| min == 0 || n >= min;
        let below = |n: u64, max: u64| max == 0 || n <= max;
        above(v.mod_revision, self.min_mod_revision)
            && below(v.mod_revision, self.max_mod_revision)
            && above(v.create_revision, self.min_create_revision)
            && below(v.create_revision, self.max_create_revision)
    }
}

/// How many of the oldest versions a compaction at `rev` drops: all before the newest one at or
/// before `rev`, and that one too when it is a delete older than `rev` (a delete at `rev` stays,
/// so a watch from `rev` still sees it).
fn keep_from(history: &History, rev: u64) -> usize {
    let at_or_before = history.partition_point(|v| v.mod_revision <= rev);
    let Some(newest) = at_or_before.checked_sub(1) else {
        return 0;
    };
    match history.get(newest) {
        Some(v) if !v.live() && v.mod_revision < rev => newest + 1,
        _ => newest,
    }
}

/// The live version at `rev`: the newest at or before it, unless that is a delete.
fn version_at(history: &History, rev: u64) -> Option<&Version> {
    let at_or_before = history.partition_point(|v| v.mod_revision <= rev);
    history
        .get(at_or_before.checked_sub(1)?)
        .filter(|v| v.live())
}

/// The live version now.
fn latest(history: &History) -> Option<&Version> {
    history.last().filter(|v| v.live())
}

/// etcd's sort: by the target, ascending unless DESCEND; a target other than KEY with no order
/// means ascending. Ties keep key order (ascending), so the result is the same on every node.
fn sort_kvs(kvs: &mut [KeyValue], order: SortOrder, target: SortTarget) {
    let by = |a: &KeyValue, b: &KeyValue| -> Ordering {
        match target {
            SortTarget::Key => a.key.cmp(&b.key),
            SortTarget::Version => a.version.cmp(&b.version),
            SortTarget::Create => a.create_revision.cmp(&b.create_revision),
            SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
            SortTarget::Value => a.value.cmp(&b.value),
        }
    };
    match order {
        SortOrder::Descend => kvs.sort_by(|a, b| by(b, a)),
        SortOrder::None | SortOrder::Ascend => kvs.sort_by(by),
    }
}
