//! `State` and `apply_effects`, the only code that changes it.
//!
//! The Raft state machine calls `apply_effects` once per committed entry, in log order, on every
//! replica (and `apply_blank` for blank and membership entries); readers call `get`/`list`/`lock`
//! on the same `State`. Everything here is deterministic: no clock (time comes from the
//! leader-stamped `ApplyContext::time_ms`), no I/O, no randomness, no hash-order iteration. A
//! `Rejection` is an ordinary `Response`: it leaves objects, revision, retired set and locks
//! exactly as they were (the state's time and term tracking may still advance to the entry's,
//! which is harmless and keeps time monotone across every entry).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use crate::alarms::AlarmTable;
use crate::auth::AuthTable;
use crate::command::{Command, Event, Rejection, Response, TxnOp};
use crate::deployments::{Deployment, DeploymentTable, DEPLOYMENT_KIND};
use crate::locks::{Fence, Lock, LockContext, LockEvent, LockTable};
use crate::objects::apply::{apply_object_op, Change, ObjectOp};
use crate::objects::count::{CountBy, Counts, LabelCounts};
use crate::objects::resource::{ObjectKey, Resource, DEFAULT_NAMESPACE};
use crate::objects::selector::Selector;
use crate::operations::{
    Dispatch, OpEvent, OpFilter, Operation, OperationId, OperationTable, OpsDue, Worker,
};
use crate::pools::{PoolIndex, PoolView, POOL_ITEMS_MAX, POOL_KIND};
use crate::reservations::{ReservationIndex, DECOMMISSION_ITEMS_MAX};

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod read_tests;
#[cfg(test)]
mod tests;

pub use crate::snapshot::SNAPSHOT_FORMAT;

/// Most ops in one `Command::Txn` (etcd's default `--max-txn-ops`).
pub const TXN_OPS_MAX: usize = 128;

/// Where the entry being applied sits in the log, and the time its leader stamped on it.
#[derive(Clone, Copy, Debug)]
pub struct ApplyContext {
    /// Raft log index of the entry; feeds uids.
    pub log_index: u64,
    /// Raft term of the entry; feeds uids and the lock grace after a leader change.
    pub term: u64,
    /// Leader wall-clock time in ms since the Unix epoch (`Proposal::time_ms`).
    pub time_ms: u64,
}

/// The replicated domain state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// Store revision: +1 per object change, never decreases. Every stored object's
    /// resourceVersion is <= this.
    pub(crate) revision: u64,
    /// Largest leader time applied so far; persisted in snapshots so time never runs backwards,
    /// not even across a leader change to a node with a slower clock.
    pub(crate) time_ms: u64,
    /// All objects, ordered by key so lists and pages are deterministic and cheap to range over.
    /// A persistent map of shared objects: cloning the state for a snapshot is O(1) and the
    /// clone shares every object, so snapshots never stall apply.
    pub(crate) objects: imbl::OrdMap<ObjectKey, Arc<Resource>>,
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
}

/// What one or more applied entries did besides their `Response`: object changes for resource
/// watchers, lock changes for lock watchers and waiting acquires, and operation changes for
/// operation watchers and worker streams. Cleared by the caller.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    /// One per object change, in revision order.
    pub events: Vec<Event>,
    /// One per grant, release, expiry, cancelled or expired wait, in the order they happened.
    pub lock_events: Vec<LockEvent>,
    /// One per operation change, in the order they happened.
    pub op_events: Vec<OpEvent>,
    /// One per waiting pool acquire granted or removed.
    pub pool_events: Vec<crate::pools::PoolEvent>,
}

impl Effects {
    /// True when nothing happened.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.lock_events.is_empty()
            && self.op_events.is_empty()
            && self.pool_events.is_empty()
    }
}

/// One page of `State::list`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    /// Matching objects in key order.
    pub items: Vec<Resource>,
    /// The last returned key when the page was cut by `limit` and more keys follow in range;
    /// pass it back as `after` for the next page.
    pub next: Option<ObjectKey>,
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

    /// One object by key.
    pub fn get(&self, key: &ObjectKey) -> Option<&Resource> {
        self.objects.get(key).map(|o| &**o)
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True when no object is stored.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Every kind stored, with its number of objects, in kind order (kept counts, no scan).
    pub fn kind_counts(&self) -> impl Iterator<Item = (&str, u64)> {
        self.label_counts.kinds()
    }

    /// The objects of one kind, in key order (ranges over the kind only).
    pub fn objects_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Resource> + 'a {
        self.objects
            .range(ObjectKey::new(kind, "", "")..)
            .take_while(move |(key, _)| key.kind == kind)
            .map(|(_, o)| &**o)
    }

    /// All objects in key order (for snapshots of watch caches and diagnostics).
    pub fn objects(&self) -> impl Iterator<Item = &Resource> {
        self.objects.values().map(|o| &**o)
    }

    /// Objects of one kind, in one namespace or all, matching `selector`, in key order, starting
    /// strictly after `after`, at most `limit` of them (`0` means no limit). Ranges over the
    /// kind (and namespace) only, never the whole store.
    pub fn list(
        &self,
        kind: &str,
        namespace: Option<&str>,
        selector: &Selector,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> ListPage {
        let start = ObjectKey::new(kind, namespace.unwrap_or(""), "");
        let lower = match after {
            Some(after) if *after >= start => Bound::Excluded(after.clone()),
            _ => Bound::Included(start),
        };
        let in_scope =
            |key: &ObjectKey| key.kind == kind && namespace.is_none_or(|ns| key.namespace == ns);
        let mut range = self
            .objects
            .range((lower, Bound::Unbounded))
            .take_while(|(key, _)| in_scope(key));
        let mut page = ListPage::default();
        let mut last = None;
        for (key, object) in range.by_ref() {
            if selector.matches(&object.metadata.labels) {
                page.items.push((**object).clone());
                last = Some(key);
                if page.items.len() == limit {
                    break;
                }
            }
        }
        if limit != 0 && page.items.len() == limit && range.next().is_some() {
            page.next = last.cloned();
        }
        page
    }

    /// Counts objects of `kind` (in `namespace`, or all) matching `selector` by `by`. A count by
    /// label over all namespaces with no selector is read from the kept counts; the others range
    /// over the kind's objects only.
    pub fn count(
        &self,
        kind: &str,
        namespace: Option<&str>,
        selector: &Selector,
        by: &CountBy,
    ) -> Result<Counts, Rejection> {
        if let (CountBy::Label(key), None, true) = (by, namespace, selector.is_everything()) {
            return self.label_counts.by_label(kind, key.as_str());
        }
        let start = ObjectKey::new(kind, namespace.unwrap_or(""), "");
        let mut counts = Counts::default();
        let in_scope =
            |key: &ObjectKey| key.kind == kind && namespace.is_none_or(|ns| key.namespace == ns);
        for (_, object) in self
            .objects
            .range(start..)
            .take_while(|(key, _)| in_scope(key))
        {
            if selector.matches(&object.metadata.labels) {
                counts.add(by.value_of(object))?;
            }
        }
        Ok(counts)
    }

    /// Users, roles, and whether authentication is on.
    pub fn auth(&self) -> &Arc<AuthTable> {
        &self.auth
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

    /// One lock by name.
    pub fn lock(&self, name: &str) -> Option<&Lock> {
        self.locks.get(name)
    }

    /// All locks in name order.
    pub fn locks(&self) -> impl Iterator<Item = &Lock> {
        self.locks.iter()
    }

    /// Number of lock entries (what `locks.locks_max` bounds).
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }

    /// The last fencing token issued, for any lock (0 before the first grant).
    pub fn last_lock_token(&self) -> u64 {
        self.locks.last_token()
    }

    /// The state time (largest leader time so far) when the current term's first time-stamped
    /// entry was applied; `None` before it is. A `LockSweep` expires nothing until
    /// `time_ms() >= term_started_ms + grace_ms`, and nothing at all as that first entry.
    pub fn term_started_ms(&self) -> Option<u64> {
        self.term_started_ms
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

    /// Lock names with something for a `LockSweep` to do at `now_ms` (a holder past its expiry,
    /// a waiter past its deadline, or a lock-delay that has ended), earliest first, at most
    /// `LOCK_SWEEP_NAMES_MAX`. For the leader's expiry task; apply re-checks everything.
    pub fn locks_due(&self, now_ms: u64) -> Vec<String> {
        self.locks.due(now_ms)
    }

    /// One operation by id (while it is retained: not ended, or among the last
    /// `operations.finished_max` ended).
    pub fn operation(&self, id: OperationId) -> Option<&Operation> {
        self.ops.get(id)
    }

    /// Retained operations in id (= submit) order, strictly after `after`, that `filter`
    /// matches, at most `limit` (`0`: no limit).
    pub fn operations(
        &self,
        filter: &OpFilter,
        after: Option<OperationId>,
        limit: usize,
    ) -> Vec<&Operation> {
        self.ops.list(filter, after, limit)
    }

    /// Number of retained operations, and of those not yet ended.
    pub fn operation_counts(&self) -> (usize, usize) {
        (self.ops.len(), self.ops.active_len())
    }

    /// The operation an idempotency key names, while it is retained.
    pub fn operation_by_key(&self, key: &str) -> Option<&Operation> {
        self.ops.by_key(key)
    }

    /// One registered worker by id.
    pub fn worker(&self, id: &str) -> Option<&Worker> {
        self.ops.worker(id)
    }

    /// Registered workers in id order; `Worker::is_alive(time_ms)` says which are alive.
    pub fn workers(&self) -> impl Iterator<Item = &Worker> {
        self.ops.workers()
    }

    /// The assignments the leader's scheduler may propose at `now_ms` (at most `max`): queued
    /// operations oldest first, each the first not ended on its target and with its lock free
    /// (under `holders_max`), to the live worker that handles it with the most room. Apply
    /// re-checks each `OpAssign`.
    pub fn ops_dispatchable(&self, now_ms: u64, holders_max: u32, max: usize) -> Vec<Dispatch> {
        let none = BTreeMap::new();
        self.ops
            .dispatchable(&self.locks, now_ms, holders_max, max, &none)
    }

    /// `ops_dispatchable` for a scheduler with assignments proposed and not yet answered
    /// (`pending`: operation -> worker): it offers none of those operations again, and counts
    /// the ones not applied yet against their workers' room, so it can plan the next round
    /// while earlier ones are still in the log.
    pub fn ops_dispatchable_besides(
        &self,
        now_ms: u64,
        holders_max: u32,
        max: usize,
        pending: &BTreeMap<OperationId, String>,
    ) -> Vec<Dispatch> {
        self.ops
            .dispatchable(&self.locks, now_ms, holders_max, max, pending)
    }

    /// Workers past their TTL and operations past their deadline at `now_ms`, for the leader's
    /// `OpSweep`; apply re-checks everything.
    pub fn ops_due(&self, now_ms: u64) -> OpsDue {
        self.ops.due(now_ms)
    }

    /// `FenceRejected` unless `fence` is absent or names a live WRITE holder.
    pub(crate) fn check_fence(&self, fence: Option<&Fence>) -> Result<(), Rejection> {
        fence.map_or(Ok(()), |fence| self.locks.check_fence(fence))
    }

    /// The operation table's invariants against the lock table (for tests; a restore checks
    /// them too).
    #[cfg(test)]
    pub(crate) fn check_operations(&self) -> Result<(), String> {
        self.ops.check_invariants(&self.locks)
    }

    /// A copy with this state's clock (time and term tracking) replaced by `other`'s, so tests
    /// can check that a rejection changed nothing else.
    #[cfg(test)]
    pub(crate) fn with_clock_of(&self, other: &State) -> State {
        State {
            time_ms: other.time_ms,
            term: other.term,
            term_started_ms: other.term_started_ms,
            ..self.clone()
        }
    }

    /// Stores `object` under `key`, keeping the derived indexes in step; returns the object it
    /// replaced. The one way (with `remove_object`) objects change.
    pub(crate) fn put_object(
        &mut self,
        key: ObjectKey,
        object: Arc<Resource>,
    ) -> Option<Arc<Resource>> {
        let previous = self.objects.insert(key, Arc::clone(&object));
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

    /// The reservations whose decommission is due at `now_ms` (marked `toDelete`, or past their
    /// end) and not yet submitted, earliest first, at most `DECOMMISSION_ITEMS_MAX`. For the
    /// leader's sweeper; apply re-checks each.
    pub fn reservations_due(&self, now_ms: u64) -> Vec<ObjectKey> {
        self.reservations.due(now_ms, DECOMMISSION_ITEMS_MAX)
    }

    /// Per-node reservation counters and the due index.
    pub fn reservations(&self) -> &ReservationIndex {
        &self.reservations
    }

    /// Pool leases whose state's expiry passed at `now_ms`, earliest first, at most
    /// `POOL_ITEMS_MAX`: what the leader's reaper proposes to reset. Apply re-checks each.
    pub fn pools_expired(&self, now_ms: u64) -> Vec<String> {
        self.pools.expired(now_ms, POOL_ITEMS_MAX)
    }

    /// Waiting pool acquires past their deadline at `now_ms`, earliest first, at most
    /// `POOL_ITEMS_MAX`: what the leader's reaper proposes to expire.
    pub fn pool_claims_expired(&self, now_ms: u64) -> Vec<String> {
        self.pools.claims_expired(now_ms, POOL_ITEMS_MAX)
    }

    /// For each virtual resource being constructed, what the leader's Mason task proposes: its
    /// construct operation if none was submitted (or it is forgotten), `Constructed` once it
    /// ended. Nothing while it runs.
    pub fn mason_due(&self, _now_ms: u64) -> Vec<crate::pools::MasonDue> {
        use crate::pools::{MasonDue, CONSTRUCT_KIND};
        let mut due = Vec::new();
        for name in self.pools.constructing() {
            let key = ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, &name);
            let Some(view) = self.objects.get(&key).and_then(|o| PoolView::of(o)) else {
                continue;
            };
            match self.ops.by_key(&view.construct_key) {
                Some(op) if op.state.is_final() => due.push(MasonDue::Ended { name }),
                Some(_) => {}
                None => {
                    let work = ObjectKey::new(CONSTRUCT_KIND, DEFAULT_NAMESPACE, &name);
                    if let Some(object) = self.objects.get(&work) {
                        due.push(MasonDue::Submit {
                            name,
                            key: view.construct_key.clone(),
                            params: object.spec.to_value(),
                        });
                    }
                }
            }
        }
        due
    }

    /// Whether a dynamic pool's resource outlived its lifespan at `now_ms` and no one holds it:
    /// the leader's reaper then proposes a `Reconcile`, which deletes it.
    pub fn pools_reconcile_due(&self, now_ms: u64) -> bool {
        self.pools.past_lifespan(now_ms).iter().any(|name| {
            let key = ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, name);
            self.objects
                .get(&key)
                .and_then(|o| PoolView::of(o))
                .is_some_and(|v| v.owner.is_empty() && v.parent.is_empty())
        })
    }

    /// The resources leased with virtual pool resource `object` (none if it is not virtual),
    /// in the order its `leasedResources` lists them.
    pub fn pool_leased(&self, object: &Resource) -> Vec<Arc<Resource>> {
        let Some(view) = PoolView::of(object) else {
            return Vec::new();
        };
        crate::pools::leased_of(&view.user_data)
            .iter()
            .filter_map(|child| {
                let key = ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, child);
                self.objects.get(&key).cloned()
            })
            .filter(|o| PoolView::of(o).is_some_and(|v| v.parent == object.metadata.name))
            .collect()
    }

    /// The pool indexes.
    pub fn pools(&self) -> &PoolIndex {
        &self.pools
    }

    /// One deployment's status by the key of its mirror object.
    pub fn deployment(&self, key: &ObjectKey) -> Option<&Deployment> {
        self.deployments.get(key)
    }

    /// Number of deployments.
    pub fn deployment_count(&self) -> usize {
        self.deployments.len()
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

/// Applies one committed command: THE entry that changes `State`. Pure: no clock, I/O or
/// randomness. Never panics on any `Command`. Pushes one `Event` per object change, in revision
/// order, and one `LockEvent` per lock change; a rejected command pushes none. Lock commands
/// never change the store revision.
pub fn apply_effects(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &Command,
    out: &mut Effects,
) -> Response {
    if let Command::Guarded {
        auth_revision,
        command,
    } = cmd
    {
        if *auth_revision == state.auth.revision {
            return apply_effects(state, ctx, command, out);
        }
        advance_time(state, ctx);
        observe_term(state, ctx);
        start_term_clock(state, ctx);
        return Response::Rejected(Rejection::AuthChanged {
            authorized_at: *auth_revision,
            now: state.auth.revision,
        });
    }
    let revision_before = state.revision;
    let events_before = out.events.len();
    advance_time(state, ctx);
    observe_term(state, ctx);
    if let Some(rejection) = mirror_write(cmd).or(state.ensure_space_for(cmd).err()) {
        start_term_clock(state, ctx);
        return Response::Rejected(rejection);
    }
    let events = &mut out.events;
    let response = match cmd {
        Command::Create { object, fence } => {
            apply_single(state, ctx, fence, ObjectOp::Create(object), events)
        }
        Command::Update {
            object,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::Update(object, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        Command::UpdateStatus {
            object,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::UpdateStatus(object, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        Command::Delete {
            key,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::Delete(key, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        Command::Txn { ops, fence } => apply_txn(state, ctx, ops, fence, events),
        Command::RetireNode { node_id } => {
            state.retired.insert(*node_id);
            Response::Done {
                revision: state.revision,
            }
        }
        Command::LockAcquire { .. }
        | Command::LockRefresh { .. }
        | Command::LockRelease { .. }
        | Command::LockCancelWait { .. }
        | Command::LockSweep { .. } => {
            let lock_ctx = LockContext {
                now_ms: state.time_ms,
                log_index: ctx.log_index,
                term_started_ms: state.term_started_ms,
                revision: state.revision,
            };
            state
                .locks
                .apply_command(&lock_ctx, cmd, &mut out.lock_events)
        }
        Command::WorkerRegister { .. }
        | Command::WorkerHeartbeat { .. }
        | Command::WorkerDeregister { .. }
        | Command::OpSubmit { .. }
        | Command::OpAssign { .. }
        | Command::OpReport { .. }
        | Command::OpAbort { .. }
        | Command::OpSweep { .. }
        | Command::Decommission { .. } => {
            crate::operations::apply::apply_operations_command(state, ctx, cmd, out)
        }
        Command::Deployment {
            key,
            action,
            limits,
        } => crate::deployments::apply::apply_deployment(state, ctx, key, action, limits, events),
        Command::Pool { action, grace_ms } => crate::pools::apply::apply_pool(
            state,
            ctx,
            action,
            *grace_ms,
            events,
            &mut out.pool_events,
        ),
        Command::Auth { action } => Arc::make_mut(&mut state.auth).apply(action, state.time_ms),
        Command::Alarm { action } => state.alarms.apply(action, state.time_ms),
        Command::Guarded { .. } => unreachable!("unwrapped above"),
    };
    // After the command: a sweep that is itself the term's first stamped entry sees no start,
    // so it expires nothing whatever its grace.
    start_term_clock(state, ctx);
    debug_assert!(state.revision >= revision_before, "revision went backwards");
    debug_assert_eq!(
        out.events.len() - events_before,
        usize::try_from(state.revision - revision_before).unwrap_or(usize::MAX),
        "one event per revision"
    );
    response
}

/// The refusal of a resource write (or an operation) aimed at a deployment's mirror object: those
/// change only with their deployment (`Command::Deployment`), or mirror and table would part.
fn mirror_write(cmd: &Command) -> Option<Rejection> {
    let refuse = |key: &ObjectKey| {
        let api = match key.kind.as_str() {
            DEPLOYMENT_KIND => {
                "mirror deployments and change only through the StatusService API \
                                (steward deployment ...)"
            }
            POOL_KIND
            | crate::pools::POOL_CLAIM_KIND
            | crate::pools::VIRTUAL_CONFIG_KIND
            | crate::pools::DYNAMIC_KIND
            | crate::pools::CONSTRUCT_KIND => {
                "are leased and synced only through the LeaseService API (steward pool ...)"
            }
            _ => return None,
        };
        Some(Rejection::Invalid {
            field: "kind".to_string(),
            rule: format!(
                "{} objects {api}; {key} cannot be written directly",
                key.kind
            ),
        })
    };
    match cmd {
        Command::Create { object, .. }
        | Command::Update { object, .. }
        | Command::UpdateStatus { object, .. } => refuse(&object.key()),
        Command::Delete { key, .. } => refuse(key),
        // The leader's Mason task submits the construct operations on their objects.
        Command::OpSubmit { target: key, .. } if key.kind == crate::pools::CONSTRUCT_KIND => None,
        Command::OpSubmit { target: key, .. } => refuse(key),
        Command::Txn { ops, .. } => ops.iter().find_map(|op| refuse(&op.key())),
        _ => None,
    }
}

/// `apply_effects` for callers that only care about objects (resource-only tools and tests):
/// lock events are dropped. The Raft state machine must use `apply_effects`, or waiting
/// acquires and lock watchers would never hear of grants.
pub fn apply(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &Command,
    events: &mut Vec<Event>,
) -> Response {
    let mut out = Effects {
        events: std::mem::take(events),
        ..Effects::default()
    };
    let response = apply_effects(state, ctx, cmd, &mut out);
    *events = out.events;
    response
}

/// Applies a blank or membership entry: only the time and the term advance (such entries carry
/// no leader time, so they never start the term's grace clock).
pub fn apply_blank(state: &mut State, ctx: &ApplyContext) {
    advance_time(state, ctx);
    observe_term(state, ctx);
}

fn advance_time(state: &mut State, ctx: &ApplyContext) {
    let before = state.time_ms;
    state.time_ms = state.time_ms.max(ctx.time_ms);
    debug_assert!(state.time_ms >= before, "time ran backwards");
}

/// A newer term resets the term's start (the new leader has not stamped anything yet).
fn observe_term(state: &mut State, ctx: &ApplyContext) {
    if ctx.term > state.term {
        state.term = ctx.term;
        state.term_started_ms = None;
    }
}

/// The first time-stamped entry of the current term starts its clock at the state time (not the
/// raw entry time: that may lag behind a previous leader's clock, and measuring the grace from
/// it would shorten the grace).
fn start_term_clock(state: &mut State, ctx: &ApplyContext) {
    if ctx.term == state.term && state.term_started_ms.is_none() {
        state.term_started_ms = Some(state.time_ms);
    }
}

/// One object op, after its fence (if any) holds.
fn apply_single(
    state: &mut State,
    ctx: &ApplyContext,
    fence: &Option<Fence>,
    op: ObjectOp<'_>,
    events: &mut Vec<Event>,
) -> Response {
    if let Err(rejection) = state.check_fence(fence.as_ref()) {
        return Response::Rejected(rejection);
    }
    match apply_object_op(state, ctx, op) {
        Ok(change) => {
            emit(events, &change);
            Response::Object {
                // The store and the event share the object; the reply takes its own copy.
                object: Arc::unwrap_or_clone(change.object),
                revision: state.revision,
            }
        }
        Err(rejection) => Response::Rejected(rejection),
    }
}

/// All ops or none, under one fence checked first. Ops change the live map and record undo
/// entries (previous values moved out of the map, so no copy of the store is made); a failure
/// replays them backwards.
fn apply_txn(
    state: &mut State,
    ctx: &ApplyContext,
    ops: &[TxnOp],
    fence: &Option<Fence>,
    events: &mut Vec<Event>,
) -> Response {
    if ops.is_empty() {
        return Response::Rejected(Rejection::Invalid {
            field: "ops".to_string(),
            rule: "at least one op".to_string(),
        });
    }
    if ops.len() > TXN_OPS_MAX {
        return Response::Rejected(Rejection::TooLarge {
            field: "ops".to_string(),
            rule: format!(
                "{} ops, more than the limit TXN_OPS_MAX = {TXN_OPS_MAX}",
                ops.len()
            ),
        });
    }
    if let Err(rejection) = state.check_fence(fence.as_ref()) {
        return Response::Rejected(rejection);
    }
    let revision_before = state.revision;
    let events_before = events.len();
    let mut undo = Vec::with_capacity(ops.len());
    let mut objects = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        match apply_object_op(state, ctx, op.into()) {
            Ok(change) => {
                emit(events, &change);
                undo.extend(change.undo);
                objects.push(Arc::unwrap_or_clone(change.object));
            }
            Err(cause) => {
                for (key, previous) in undo.into_iter().rev() {
                    match previous {
                        Some(object) => state.put_object(key, object),
                        None => state.remove_object(&key),
                    };
                }
                state.revision = revision_before;
                events.truncate(events_before);
                return Response::Rejected(Rejection::TxnOpFailed {
                    index,
                    cause: Box::new(cause),
                });
            }
        }
    }
    Response::Txn {
        objects,
        revision: state.revision,
    }
}

pub(crate) fn emit(events: &mut Vec<Event>, change: &Change) {
    if let Some(event_type) = change.event_type {
        events.push(Event {
            event_type,
            revision: change.object.metadata.resource_version,
            object: Arc::clone(&change.object),
        });
    }
}
