//! `State` snapshots: the whole state as versioned JSON, for Raft snapshot install and restore.
//!
//! The body carries the revision, the time, the retired node ids, the locks with the token counter,
//! the operations and workers, and the term tracking along with the objects, so a restored replica
//! continues exactly where the snapshot was taken (time included: it must never run backwards
//! across a snapshot boundary; and the token counter: a token, hence an epoch, must never be issued
//! twice).

use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::alarms::{Alarm, AlarmTable};
use crate::auth::AuthTable;
use crate::deployments::{DeploymentRecord, DeploymentTable};
use crate::kv::lease::Lease;
use crate::kv::{Bytes, KvStore, Version};
use crate::locks::{Lock, LockTable};
use crate::objects::count::LabelCounts;
use crate::objects::map::ObjectMap;
use crate::objects::resource::{ObjectKey, Resource};
use crate::operations::{Operation, OperationTable, Worker};
use crate::pools::PoolIndex;
use crate::reservations::ReservationIndex;
use crate::state::State;

/// Version of the `write_snapshot` body; bump on any incompatible change.
/// 2: locks, `last_lock_token`, `term`, `term_started_ms`.
/// 3: `operations`, `workers`.
/// 4: `deployments`.
/// 5: `auth` (users, roles, on or off).
/// 6: `alarms`.
/// 7: `kv` (etcd's keyspace).
pub const SNAPSHOT_FORMAT: u32 = 7;

/// Format 6 (no keyspace) is still read: it restores with an empty keyspace.
const SNAPSHOT_FORMAT_NO_KV: u32 = 6;

/// Format 5 (no alarms) is still read: it restores with no alarm raised.
const SNAPSHOT_FORMAT_NO_ALARMS: u32 = 5;

/// Format 4 (no auth) is still read: it restores with no users and authentication off.
const SNAPSHOT_FORMAT_NO_AUTH: u32 = 4;

/// Format 3 (no deployments) is still read: it restores with no deployments.
const SNAPSHOT_FORMAT_NO_DEPLOYMENTS: u32 = 3;

/// Format 2 (no operations) is still read: it restores with no operations and no workers, which
/// is exactly the state such a store had.
const SNAPSHOT_FORMAT_NO_OPERATIONS: u32 = 2;

/// Format 1 (no locks) is still read: it restores with no locks, token counter 0 and no term
/// tracking, which is exactly the state such a store had.
const SNAPSHOT_FORMAT_NO_LOCKS: u32 = 1;

/// The snapshot body as written (borrows the state).
#[derive(Serialize)]
struct SnapshotRef<'a> {
    format: u32,
    revision: u64,
    time_ms: u64,
    shown_ms: u64,
    objects: Objects<'a>,
    retired: &'a BTreeSet<u64>,
    locks: Vec<&'a Lock>,
    last_lock_token: u64,
    term: u64,
    term_started_ms: Option<u64>,
    operations: Vec<&'a Operation>,
    workers: Vec<&'a Worker>,
    deployments: Vec<DeploymentRecord>,
    auth: &'a AuthTable,
    alarms: Vec<&'a Alarm>,
    kv: KvRef<'a>,
}

/// etcd's keyspace as written: the compaction revision, then every key with its versions, in
/// key order, streamed from the map.
#[derive(Serialize)]
struct KvRef<'a> {
    compacted: u64,
    keys: KvKeys<'a>,
    leases: Vec<&'a Lease>,
}

struct KvKeys<'a>(&'a KvStore);

#[derive(Serialize)]
struct KeyHistoryRef<'a> {
    #[serde(serialize_with = "crate::kv::b64_serialize")]
    key: &'a Bytes,
    versions: &'a [Version],
}

impl Serialize for KvKeys<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.0
                .histories()
                .map(|(key, versions)| KeyHistoryRef { key, versions }),
        )
    }
}

/// etcd's keyspace as read.
#[derive(Default, Deserialize)]
struct KvBody {
    compacted: u64,
    keys: Vec<KeyHistory>,
    #[serde(default)]
    leases: Vec<Lease>,
}

#[derive(Deserialize)]
struct KeyHistory {
    #[serde(deserialize_with = "crate::kv::b64_deserialize")]
    key: Bytes,
    versions: Vec<Version>,
}

/// The objects in key order, written as a JSON list straight from the map: the same bytes as a
/// `Vec` of them, without the `Vec` (a pointer per object).
struct Objects<'a>(&'a ObjectMap);

impl Serialize for Objects<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.values().map(|o| &**o))
    }
}

/// The snapshot body as read. The fields format 1 lacks default to empty (checked against the
/// format below).
#[derive(Deserialize)]
struct SnapshotBody {
    format: u32,
    revision: u64,
    time_ms: u64,
    /// Absent before issue 24's display clock: then the state's time, a wall-clock time then.
    #[serde(default)]
    shown_ms: u64,
    objects: ObjectsRead,
    retired: BTreeSet<u64>,
    #[serde(default)]
    locks: Vec<Lock>,
    #[serde(default)]
    last_lock_token: u64,
    #[serde(default)]
    term: u64,
    #[serde(default)]
    term_started_ms: Option<u64>,
    #[serde(default)]
    operations: Vec<Operation>,
    #[serde(default)]
    workers: Vec<Worker>,
    #[serde(default)]
    deployments: Vec<DeploymentRecord>,
    #[serde(default)]
    auth: AuthTable,
    #[serde(default)]
    alarms: Vec<Alarm>,
    #[serde(default)]
    kv: KvBody,
}

/// The objects as read, each put into the map as it is decoded: a `Vec` of them first would cost
/// a few hundred bytes per object on top of the map, at the peak of an install.
struct ObjectsRead {
    map: ObjectMap,
    /// The first key the list held twice (the map kept the later one).
    twice: Option<ObjectKey>,
}

impl<'de> Deserialize<'de> for ObjectsRead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ObjectsRead, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = ObjectsRead;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ObjectsRead, A::Error> {
                let mut read = ObjectsRead {
                    map: ObjectMap::new(),
                    twice: None,
                };
                while let Some(object) = seq.next_element::<Resource>()? {
                    if let Some(before) = read.map.insert(Arc::new(object)) {
                        read.twice.get_or_insert(before.key());
                    }
                }
                Ok(read)
            }
        }
        d.deserialize_seq(List)
    }
}

fn objects_has(objects: &ObjectsRead, key: &ObjectKey) -> bool {
    objects.map.contains_key(key)
}

impl State {
    /// Writes the whole state as versioned JSON (objects as a list in key order) to `out` as it
    /// goes. A node streams its snapshot into a file this way: encoded into memory first, it
    /// would cost the state's size again, on every node at about the same moment.
    pub fn write_snapshot(&self, out: impl Write) -> io::Result<()> {
        let (locks, last_lock_token) = self.locks.parts();
        let (operations, workers) = self.ops.parts();
        let body = SnapshotRef {
            format: SNAPSHOT_FORMAT,
            revision: self.revision,
            time_ms: self.time_ms,
            shown_ms: self.shown_ms,
            objects: Objects(&self.objects),
            retired: &self.retired,
            locks,
            last_lock_token,
            term: self.term,
            term_started_ms: self.term_started_ms,
            operations,
            workers,
            deployments: self.deployments.parts(),
            auth: &self.auth,
            alarms: self.alarms.iter().collect(),
            kv: KvRef {
                compacted: self.kv.compacted(),
                keys: KvKeys(&self.kv),
                leases: self.kv.leases().iter().collect(),
            },
        };
        // Only `out` can fail: all map keys are strings and no Serialize impl here errors.
        serde_json::to_writer(out, &body).map_err(io::Error::from)
    }

    /// Reads `write_snapshot` output back from `input` (give it a buffered reader), checking
    /// format and invariants.
    pub fn read_snapshot(input: impl Read) -> Result<State, String> {
        let body: SnapshotBody =
            serde_json::from_reader(input).map_err(|e| format!("snapshot body: {e}"))?;
        State::from_snapshot_body(body)
    }

    /// `write_snapshot` into memory, for tests and comparisons of small states.
    pub fn to_snapshot_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        // Cannot fail: writing to a Vec does not.
        let _ = self.write_snapshot(&mut bytes);
        bytes
    }

    /// `read_snapshot` from memory, for tests of small states.
    pub fn from_snapshot_bytes(bytes: &[u8]) -> Result<State, String> {
        State::read_snapshot(bytes)
    }

    fn from_snapshot_body(body: SnapshotBody) -> Result<State, String> {
        let known = [
            SNAPSHOT_FORMAT,
            SNAPSHOT_FORMAT_NO_KV,
            SNAPSHOT_FORMAT_NO_ALARMS,
            SNAPSHOT_FORMAT_NO_AUTH,
            SNAPSHOT_FORMAT_NO_DEPLOYMENTS,
            SNAPSHOT_FORMAT_NO_OPERATIONS,
            SNAPSHOT_FORMAT_NO_LOCKS,
        ];
        if !known.contains(&body.format) {
            return Err(format!(
                "snapshot format {} is not supported (expected {SNAPSHOT_FORMAT}, \
                 {SNAPSHOT_FORMAT_NO_KV} without etcd's keyspace, \
                 {SNAPSHOT_FORMAT_NO_ALARMS} without alarms, \
                 {SNAPSHOT_FORMAT_NO_AUTH} without users, \
                 {SNAPSHOT_FORMAT_NO_DEPLOYMENTS} without deployments, \
                 {SNAPSHOT_FORMAT_NO_OPERATIONS} without operations, or \
                 {SNAPSHOT_FORMAT_NO_LOCKS} without locks)",
                body.format
            ));
        }
        if body.format == SNAPSHOT_FORMAT_NO_LOCKS && !body.locks.is_empty() {
            return Err(format!(
                "snapshot format {SNAPSHOT_FORMAT_NO_LOCKS} cannot hold locks"
            ));
        }
        let with_ops = !body.operations.is_empty() || !body.workers.is_empty();
        if body.format < SNAPSHOT_FORMAT_NO_DEPLOYMENTS && with_ops {
            return Err(format!(
                "snapshot format {} cannot hold operations or workers",
                body.format
            ));
        }
        if body.format < SNAPSHOT_FORMAT_NO_AUTH && !body.deployments.is_empty() {
            return Err(format!(
                "snapshot format {} cannot hold deployments",
                body.format
            ));
        }
        let kv_held =
            !body.kv.keys.is_empty() || !body.kv.leases.is_empty() || body.kv.compacted > 0;
        if body.format < SNAPSHOT_FORMAT && kv_held {
            return Err(format!(
                "snapshot format {} cannot hold etcd's keyspace",
                body.format
            ));
        }
        let kv = restore_kv(body.kv, body.revision)?;
        if body.format < SNAPSHOT_FORMAT_NO_KV && !body.alarms.is_empty() {
            return Err(format!(
                "snapshot format {} cannot hold alarms",
                body.format
            ));
        }
        if body.format < SNAPSHOT_FORMAT_NO_ALARMS && body.auth != AuthTable::default() {
            return Err(format!("snapshot format {} cannot hold users", body.format));
        }
        let deployments = DeploymentTable::from_parts(body.deployments)
            .map_err(|e| format!("snapshot deployments: {e}"))?;
        for key in deployments.keys() {
            if !objects_has(&body.objects, key) {
                return Err(format!("snapshot deployment {key} has no mirror object"));
            }
        }
        let locks = LockTable::from_parts(body.locks, body.last_lock_token)
            .map_err(|e| format!("snapshot locks: {e}"))?;
        let ops = OperationTable::from_parts(body.operations, body.workers, &locks)
            .map_err(|e| format!("snapshot operations: {e}"))?;
        let ObjectsRead {
            map: objects,
            twice,
        } = body.objects;
        if let Some(key) = twice {
            return Err(format!("snapshot holds {key} twice"));
        }
        for object in objects.values() {
            let rv = object.metadata.resource_version;
            if rv == 0 || rv > body.revision {
                return Err(format!(
                    "snapshot object {} has resourceVersion {rv}, outside 1..={}",
                    object.key(),
                    body.revision
                ));
            }
        }
        let mut reservations = ReservationIndex::default();
        let mut label_counts = LabelCounts::default();
        let mut pools = PoolIndex::default();
        for object in objects.values() {
            reservations.replace(None, Some(&**object));
            label_counts.replace(None, Some(&**object));
            pools.replace(None, Some(&**object));
        }
        Ok(State {
            reservations,
            label_counts,
            pools,
            deployments,
            revision: body.revision,
            time_ms: body.time_ms,
            shown_ms: body.shown_ms.max(body.time_ms),
            objects,
            retired: body.retired,
            locks,
            ops,
            term: body.term,
            term_started_ms: body.term_started_ms,
            auth: Arc::new(body.auth),
            alarms: AlarmTable::from_list(body.alarms),
            kv,
        })
    }
}

/// The keyspace from a snapshot, checked: keys non-empty, each once and in order, versions in
/// revision order, none after the snapshot's revision, compaction not after it either.
fn restore_kv(body: KvBody, revision: u64) -> Result<KvStore, String> {
    if body.compacted > revision {
        return Err(format!(
            "snapshot keyspace compacted at {}, after its revision {revision}",
            body.compacted
        ));
    }
    let mut previous: Option<&Bytes> = None;
    for history in &body.keys {
        if history.key.is_empty() || previous.is_some_and(|p| *p >= history.key) {
            return Err(format!(
                "snapshot keyspace key {:?} is empty, repeated or out of order",
                history.key
            ));
        }
        previous = Some(&history.key);
        let ordered = history
            .versions
            .windows(2)
            .all(|w| w[0].mod_revision < w[1].mod_revision);
        let last = history.versions.last().map_or(0, |v| v.mod_revision);
        if history.versions.is_empty() || !ordered || last > revision {
            return Err(format!(
                "snapshot keyspace key {:?} has no versions, versions out of order, or one after \
                 revision {revision}",
                history.key
            ));
        }
    }
    let leases: BTreeSet<i64> = body.leases.iter().map(|l| l.id).collect();
    for history in &body.keys {
        let lease = history
            .versions
            .last()
            .filter(|v| v.value.is_some())
            .map_or(0, |v| v.lease);
        if lease != 0 && !leases.contains(&lease) {
            return Err(format!(
                "snapshot keyspace key {:?} is attached to lease {lease}, which it does not hold",
                history.key
            ));
        }
    }
    let histories = body.keys.into_iter().map(|h| (h.key, h.versions)).collect();
    Ok(KvStore::restore(body.compacted, histories, body.leases))
}
