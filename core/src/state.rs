//! `State`: the replicated domain state, what every capability keeps in it, and the accessors
//! that belong to no one capability (revision, time, term, auth, alarms, retired nodes) plus the
//! one way objects change (`put_object`, `remove_object`), which keeps every derived index in
//! step. Each capability's queries live beside it (`objects/queries.rs`, `locks/queries.rs`,
//! ...); only `apply` changes a `State`.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::alarms::AlarmTable;
use crate::auth::AuthTable;
use crate::command::Command;
use crate::deployments::DeploymentTable;
use crate::kv::KvStore;
use crate::locks::{Fence, LockTable};
use crate::objects::count::LabelCounts;
use crate::objects::map::ObjectMap;
use crate::objects::resource::{ObjectKey, Resource};
use crate::operations::OperationTable;
use crate::pools::PoolIndex;
use crate::rejection::Rejection;
use crate::reservations::ReservationIndex;

/// The replicated domain state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// Store revision: +1 per object change, never decreases. Every stored object's
    /// resourceVersion is <= this.
    pub(crate) revision: u64,
    /// Largest leader time applied so far; persisted in snapshots so time never runs backwards,
    /// not even across a leader change to a node with a slower clock.
    pub(crate) time_ms: u64,
    /// The time shown for when things happened (creationTimestamp): the leaders' shown wall
    /// clock, never behind `time_ms` and never running backwards (README "Time", promise 5).
    /// Nothing that expires reads it.
    pub(crate) shown_ms: u64,
    /// All objects, ordered by key so lists and pages are deterministic and cheap to range over.
    /// A persistent set of shared objects, each found by the key it carries (`ObjectMap`):
    /// cloning the state for a snapshot is O(1) and the clone shares every object, so snapshots
    /// never stall apply.
    pub(crate) objects: ObjectMap,
    /// Node ids removed from the cluster; an id may never rejoin, or it could vote twice.
    pub(crate) retired: BTreeSet<u64>,
    /// Locks and the store-wide fencing token counter.
    pub(crate) locks: LockTable,
    /// Lifecycle operations and the workers that run them.
    pub(crate) ops: OperationTable,
    /// Reservations waiting for their decommission, and per-node counters; derived from
    /// `objects` (every change goes through `put_object`/`remove_object`), never snapshotted.
    pub(crate) reservations: ReservationIndex,
    /// Objects per kind, and per label value; derived from `objects` like `reservations`.
    pub(crate) label_counts: LabelCounts,
    /// Pool resources by (type, state), request id and expiry; derived like `reservations`.
    pub(crate) pools: PoolIndex,
    /// Deployments' status (apps -> clusters -> resources, with counts), each mirrored by the
    /// object of kind `DeploymentIntentGroup` under the same key.
    pub(crate) deployments: DeploymentTable,
    /// The highest Raft term applied so far (blank and membership entries included).
    pub(crate) term: u64,
    /// State time when the first time-stamped (normal) entry of `term` was applied; `None` until
    /// the new leader's first one. Lock sweeps wait a grace after it, so no lock expires early
    /// because leadership moved.
    pub(crate) term_started_ms: Option<u64>,
    /// Users, roles, and whether authentication is on; shared with the client API's
    /// authentication layer, which clones the `Arc` (copied on change).
    pub(crate) auth: Arc<AuthTable>,
    /// Alarms raised by nodes (NOSPACE): while one is, commands that may grow the state are
    /// refused.
    pub(crate) alarms: AlarmTable,
    /// etcd's multi-version keyspace; its revisions are `revision`'s.
    pub(crate) kv: KvStore,
}

impl State {
    /// An empty store at revision 0, time 0.
    pub fn new() -> State {
        State::default()
    }

    /// The store revision: the resourceVersion of the most recent object change.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The largest leader time applied so far (ms since the Unix epoch).
    pub fn time_ms(&self) -> u64 {
        self.time_ms
    }

    /// The time shown for what happens now (ms since the Unix epoch): creationTimestamp and
    /// other displayed times. Follows the leaders' wall clocks, never runs backwards, never
    /// behind `time_ms`.
    pub fn shown_ms(&self) -> u64 {
        self.shown_ms
    }

    /// Users, roles, and whether authentication is on.
    pub fn auth(&self) -> &Arc<AuthTable> {
        &self.auth
    }

    /// etcd's keyspace.
    pub fn kv(&self) -> &KvStore {
        &self.kv
    }

    /// The raised alarms.
    pub fn alarms(&self) -> &AlarmTable {
        &self.alarms
    }

    /// `Err(NoSpace)` if `cmd` may grow the state while a NOSPACE alarm is raised: apply refuses
    /// it, and nodes refuse it before proposing (so refused writes do not fill the log).
    pub fn ensure_space_for(&self, cmd: &Command) -> Result<(), Rejection> {
        match self.alarms.no_space() {
            Some(alarm) if cmd.may_grow() => Err(Rejection::NoSpace {
                alarm: alarm.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Whether `node_id` was retired by `Command::RetireNode`.
    pub fn is_retired(&self, node_id: u64) -> bool {
        self.retired.contains(&node_id)
    }

    /// `Err(NodeRetired)` if `node_id` may not (re)join the cluster.
    pub fn ensure_not_retired(&self, node_id: u64) -> Result<(), Rejection> {
        if self.is_retired(node_id) {
            return Err(Rejection::NodeRetired { node_id });
        }
        Ok(())
    }

    /// The state time (largest leader time so far) when the current term's first time-stamped
    /// entry was applied; `None` before it is. A `LockSweep` expires nothing until
    /// `time_ms() >= term_started_ms + grace_ms`, and nothing at all as that first entry.
    pub fn term_started_ms(&self) -> Option<u64> {
        self.term_started_ms
    }

    /// The earliest cluster time at which something ends or is due (a lock holder's or waiter's
    /// expiry, a lock-delay, a worker's TTL, an operation's deadline, a pool lease, claim or
    /// lifespan, a reservation); `None` when nothing is timed. While it is `Some`, the leader
    /// checkpoints cluster time through the log (README "Time").
    pub fn next_due_ms(&self) -> Option<u64> {
        [
            self.locks.next_due_ms(),
            self.ops.next_due_ms(),
            self.pools.next_due_ms(),
            self.reservations.next_due_ms(),
            self.kv.leases().next_due_ms(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether a lock or operation sweep proposed at leader time `now_ms` could do anything,
    /// given the grace of `grace_ms` after a change of leader that apply enforces: yes before the
    /// term's first time-stamped entry (a sweep may be what starts the term's clock), no while
    /// the grace lasts, yes after it. The leader's sweepers ask this first, so a new leader
    /// proposes one sweep at most during its grace instead of one refused sweep per tick.
    pub fn sweep_may_act(&self, now_ms: u64, grace_ms: u64) -> bool {
        match self.term_started_ms {
            None => true,
            // Apply measures from the state's time, which a fast former leader may have pushed
            // past this leader's clock.
            Some(started) => now_ms.max(self.time_ms) >= started.saturating_add(grace_ms),
        }
    }

    /// `FenceRejected` unless `fence` is absent or names a live WRITE holder.
    pub(crate) fn check_fence(&self, fence: Option<&Fence>) -> Result<(), Rejection> {
        fence.map_or(Ok(()), |fence| self.locks.check_fence(fence))
    }

    /// A copy with this state's clock (time and term tracking) replaced by `other`'s, so tests
    /// can check that a rejection changed nothing else.
    #[cfg(test)]
    pub(crate) fn with_clock_of(&self, other: &State) -> State {
        State {
            time_ms: other.time_ms,
            shown_ms: other.shown_ms,
            term: other.term,
            term_started_ms: other.term_started_ms,
            ..self.clone()
        }
    }

    /// Stores `object` under its key, keeping the derived indexes in step; returns the object it
    /// replaced. The one way (with `remove_object`) objects change.
    pub(crate) fn put_object(&mut self, object: Arc<Resource>) -> Option<Arc<Resource>> {
        let previous = self.objects.insert(Arc::clone(&object));
        self.reservations
            .replace(previous.as_deref(), Some(&*object));
        self.label_counts
            .replace(previous.as_deref(), Some(&*object));
        self.pools.replace(previous.as_deref(), Some(&*object));
        previous
    }

    /// Removes the object under `key`, keeping the derived indexes in step.
    pub(crate) fn remove_object(&mut self, key: &ObjectKey) -> Option<Arc<Resource>> {
        let previous = self.objects.remove(key);
        self.reservations.replace(previous.as_deref(), None);
        self.label_counts.replace(previous.as_deref(), None);
        self.pools.replace(previous.as_deref(), None);
        previous
    }

    pub(crate) fn next_revision(&self) -> Result<u64, Rejection> {
        self.revision
            .checked_add(1)
            .ok_or_else(|| Rejection::TooLarge {
                field: "revision".to_string(),
                rule: "the store revision is exhausted".to_string(),
            })
    }
}
