//! `State` snapshots: the whole state as versioned JSON, for Raft snapshot install and restore.
//!
//! The body carries the revision, the time, the retired node ids, the locks with the token counter,
//! the operations and workers, and the term tracking along with the objects, so a restored replica
//! continues exactly where the snapshot was taken (time included: it must never run backwards
//! across a snapshot boundary; and the token counter: a token, hence an epoch, must never be issued
//! twice).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::State;
use crate::state::locks::{Lock, LockTable};
use crate::state::operations::{Operation, OperationTable, Worker};
use crate::state::resource::Resource;

/// Version of the `to_snapshot_bytes` body; bump on any incompatible change.
/// 2: locks, `last_lock_token`, `term`, `term_started_ms`.
/// 3: `operations`, `workers`.
pub const SNAPSHOT_FORMAT: u32 = 3;

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
    objects: Vec<&'a Resource>,
    retired: &'a BTreeSet<u64>,
    locks: Vec<&'a Lock>,
    last_lock_token: u64,
    term: u64,
    term_started_ms: Option<u64>,
    operations: Vec<&'a Operation>,
    workers: Vec<&'a Worker>,
}

/// The snapshot body as read. The fields format 1 lacks default to empty (checked against the
/// format below).
#[derive(Deserialize)]
struct SnapshotBody {
    format: u32,
    revision: u64,
    time_ms: u64,
    objects: Vec<Resource>,
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
}

impl State {
    /// The whole state as versioned JSON (objects as a list in key order).
    pub fn to_snapshot_bytes(&self) -> Vec<u8> {
        let (locks, last_lock_token) = self.locks.parts();
        let (operations, workers) = self.ops.parts();
        let body = SnapshotRef {
            format: SNAPSHOT_FORMAT,
            revision: self.revision,
            time_ms: self.time_ms,
            objects: self.objects.values().map(|o| &**o).collect(),
            retired: &self.retired,
            locks,
            last_lock_token,
            term: self.term,
            term_started_ms: self.term_started_ms,
            operations,
            workers,
        };
        // Cannot fail: all map keys are strings and no Serialize impl here errors.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// Reads `to_snapshot_bytes` output back, checking format and invariants.
    pub fn from_snapshot_bytes(bytes: &[u8]) -> Result<State, String> {
        let body: SnapshotBody =
            serde_json::from_slice(bytes).map_err(|e| format!("snapshot body: {e}"))?;
        let known = [
            SNAPSHOT_FORMAT,
            SNAPSHOT_FORMAT_NO_OPERATIONS,
            SNAPSHOT_FORMAT_NO_LOCKS,
        ];
        if !known.contains(&body.format) {
            return Err(format!(
                "snapshot format {} is not supported (expected {SNAPSHOT_FORMAT}, \
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
        if body.format < SNAPSHOT_FORMAT && with_ops {
            return Err(format!(
                "snapshot format {} cannot hold operations or workers",
                body.format
            ));
        }
        let locks = LockTable::from_parts(body.locks, body.last_lock_token)
            .map_err(|e| format!("snapshot locks: {e}"))?;
        let ops = OperationTable::from_parts(body.operations, body.workers, &locks)
            .map_err(|e| format!("snapshot operations: {e}"))?;
        let mut objects = imbl::OrdMap::new();
        for object in body.objects {
            let key = object.key();
            let rv = object.metadata.resource_version;
            if rv == 0 || rv > body.revision {
                return Err(format!(
                    "snapshot object {key} has resourceVersion {rv}, outside 1..={}",
                    body.revision
                ));
            }
            if objects.insert(key.clone(), Arc::new(object)).is_some() {
                return Err(format!("snapshot holds {key} twice"));
            }
        }
        Ok(State {
            revision: body.revision,
            time_ms: body.time_ms,
            objects,
            retired: body.retired,
            locks,
            ops,
            term: body.term,
            term_started_ms: body.term_started_ms,
        })
    }
}
