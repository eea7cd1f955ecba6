//! `OperationTable`: where operations and workers are kept, the indexes derived from them, the
//! queries the leader's tasks and the read API use, and the invariants every apply keeps (checked
//! on restore).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{
    Dispatch, OpFilter, OpState, Operation, OperationId, OpsDue, Worker, OP_SWEEP_ITEMS_MAX,
};
use crate::locks::LockTable;
use crate::objects::resource::ObjectKey;
use crate::wait::wait_ended;

/// All operations and workers, with indexes derived from them. Owned by `State`; changed only by
/// the methods in `changes` (called from `operations/apply.rs`).
///
/// Operations and their indexes are persistent maps, like the state's objects, so cloning the
/// state for a snapshot stays cheap; workers (at most `operations.workers_max`) are a plain map.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct OperationTable {
    /// Every retained operation, by id (= submit order).
    pub(super) ops: imbl::OrdMap<OperationId, Arc<Operation>>,
    /// By id, so listings and sweeps are deterministic.
    pub(super) workers: BTreeMap<String, Worker>,
    /// Derived: idempotency key -> operation.
    pub(super) keys: imbl::OrdMap<String, OperationId>,
    /// Derived: (target, id) of every operation not ended; the first of a target runs first.
    pub(super) active: imbl::OrdSet<(ObjectKey, OperationId)>,
    /// Derived: queued operations, oldest first.
    pub(super) queued: imbl::OrdSet<OperationId>,
    /// Derived: (deadline, id) of operations a deadline can still act on (not ended, not
    /// aborting).
    pub(super) deadlines: imbl::OrdSet<(u64, OperationId)>,
    /// Derived: (end time, id) of ended operations, oldest end first: the eviction order.
    pub(super) finished: imbl::OrdSet<(u64, OperationId)>,
    /// Derived: (expiry, id) of every worker.
    pub(super) expiries: BTreeSet<(u64, String)>,
}

impl OperationTable {
    pub(crate) fn get(&self, id: OperationId) -> Option<&Operation> {
        self.ops.get(&id).map(|op| &**op)
    }

    /// Retained operations in id order, starting strictly after `after`, that `filter` matches,
    /// at most `limit` (`0`: no limit). Scans the retained operations from `after` on (their
    /// number is bounded by `operations.active_max + operations.finished_max`).
    pub(crate) fn list(
        &self,
        filter: &OpFilter,
        after: Option<OperationId>,
        limit: usize,
    ) -> Vec<&Operation> {
        let start = after.map_or(OperationId(0), |a| OperationId(a.0.saturating_add(1)));
        let matching = self
            .ops
            .range(start..)
            .map(|(_, op)| &**op)
            .filter(|op| filter.matches(op));
        match limit {
            0 => matching.collect(),
            n => matching.take(n).collect(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// Operations not yet ended.
    pub(crate) fn active_len(&self) -> usize {
        self.active.len()
    }

    pub(crate) fn worker(&self, id: &str) -> Option<&Worker> {
        self.workers.get(id)
    }

    pub(crate) fn workers(&self) -> impl Iterator<Item = &Worker> {
        self.workers.values()
    }

    /// The operation an idempotency key names.
    pub(crate) fn by_key(&self, key: &str) -> Option<&Operation> {
        self.keys.get(key).and_then(|&id| self.get(id))
    }

    /// Ids of the operations not yet ended on `target`, oldest first.
    pub(crate) fn active_on<'a>(
        &'a self,
        target: &'a ObjectKey,
    ) -> impl Iterator<Item = OperationId> + 'a {
        let first = (target.clone(), OperationId(0));
        self.active
            .range(first..)
            .take_while(move |(key, _)| key == target)
            .map(|&(_, id)| id)
    }

    /// What a sweep at `now_ms` must look at, earliest first, at most `OP_SWEEP_ITEMS_MAX` of
    /// each.
    /// The earliest worker expiry or operation deadline.
    pub(crate) fn next_due_ms(&self) -> Option<u64> {
        let worker = self.expiries.first().map(|(at, _)| *at);
        let op = self.deadlines.get_min().map(|(at, _)| *at);
        worker.into_iter().chain(op).min()
    }

    pub(crate) fn due(&self, now_ms: u64) -> OpsDue {
        let workers = self.expiries.iter().take_while(|(at, _)| *at <= now_ms);
        let ops = self
            .deadlines
            .iter()
            .take_while(|(at, _)| wait_ended(*at, now_ms));
        OpsDue {
            workers: workers
                .take(OP_SWEEP_ITEMS_MAX)
                .map(|(_, id)| id.clone())
                .collect(),
            operations: ops.take(OP_SWEEP_ITEMS_MAX).map(|&(_, id)| id).collect(),
        }
    }

    /// The assignments the leader may propose at `now_ms`, at most `max`: queued operations
    /// oldest first, each only if it is the first not ended on its target, its deadline has not
    /// passed, and its lock is grantable (with `holders_max` holders at most; one assignment per
    /// lock name per plan), to the live worker handling its (kind, verb) with the most room (ties:
    /// the smallest id). Apply re-checks each.
    pub(crate) fn dispatchable(
        &self,
        locks: &LockTable,
        now_ms: u64,
        holders_max: u32,
        max: usize,
        pending: &BTreeMap<OperationId, String>,
    ) -> Vec<Dispatch> {
        // Proposed assignments not applied yet: their operations are still queued here, and
        // they will take room on their workers.
        let unapplied = |id: &OperationId| self.queued.contains(id);
        let mut taken: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, worker) in pending.iter().filter(|(id, _)| unapplied(id)) {
            *taken.entry(worker.as_str()).or_default() += 1;
        }
        let mut room: BTreeMap<&str, usize> = self
            .workers
            .values()
            .filter(|w| w.is_alive(now_ms))
            .map(|w| {
                let taken = taken.get(w.id.as_str()).copied().unwrap_or(0);
                (w.id.as_str(), w.room().saturating_sub(taken))
            })
            .filter(|(_, room)| *room > 0)
            .collect();
        let mut locks_planned = BTreeSet::new();
        let mut plan = Vec::new();
        for &id in &self.queued {
            if plan.len() >= max || room.is_empty() {
                break;
            }
            if pending.contains_key(&id) {
                continue;
            }
            let Some(op) = self.get(id) else { continue };
            let first = self.active_on(&op.target).next() == Some(id);
            let late = op.deadline_at_ms.is_some_and(|at| wait_ended(at, now_ms));
            let lock_free = op.policy.lock.as_ref().is_none_or(|l| {
                !locks_planned.contains(l.name.as_str())
                    && locks.grantable(&l.name, l.mode, holders_max, now_ms)
            });
            if !first || late || !lock_free {
                continue;
            }
            let fits = |w: &&str| {
                let worker = self.workers.get(*w);
                worker.is_some_and(|w| w.handles(&op.target.kind, &op.verb))
            };
            let best = room
                .iter()
                .filter(|(w, _)| fits(w))
                .max_by(|(a, ra), (b, rb)| ra.cmp(rb).then(b.cmp(a)))
                .map(|(w, _)| *w);
            let Some(worker) = best else { continue };
            if let Some(lock) = &op.policy.lock {
                locks_planned.insert(lock.name.as_str());
            }
            match room.get_mut(worker) {
                Some(r) if *r > 1 => *r -= 1,
                _ => {
                    room.remove(worker);
                }
            }
            plan.push(Dispatch {
                id,
                worker: worker.to_string(),
            });
        }
        plan
    }

    /// The snapshot body's view: operations in id order and workers in id order.
    pub(crate) fn parts(&self) -> (Vec<&Operation>, Vec<&Worker>) {
        let ops = self.ops.values().map(|op| &**op).collect();
        (ops, self.workers.values().collect())
    }

    /// Rebuilds a table (and its indexes) from `parts`, checking every invariant against the
    /// restored lock table.
    pub(crate) fn from_parts(
        ops: Vec<Operation>,
        workers: Vec<Worker>,
        locks: &LockTable,
    ) -> Result<OperationTable, String> {
        let mut table = OperationTable::default();
        let mut stored_assigned = BTreeMap::new();
        for mut worker in workers {
            let id = worker.id.clone();
            // Re-derived from the operations below, then compared.
            stored_assigned.insert(id.clone(), std::mem::take(&mut worker.assigned));
            table.expiries.insert((worker.expires_at_ms(), id.clone()));
            if table.workers.insert(id.clone(), worker).is_some() {
                return Err(format!("snapshot holds worker {id} twice"));
            }
        }
        for op in ops {
            if table.ops.contains_key(&op.id) {
                return Err(format!("snapshot holds operation {} twice", op.id));
            }
            if let Some(key) = op
                .idempotency_key
                .as_ref()
                .filter(|k| table.keys.contains_key(*k))
            {
                return Err(format!("snapshot holds idempotency key {key:?} twice"));
            }
            table.insert(Arc::new(op));
        }
        for (id, stored) in stored_assigned {
            let derived = table.workers.get(&id).map(|w| &w.assigned);
            if derived != Some(&stored) {
                return Err(format!(
                    "worker {id}: assigned {stored:?} but its operations say {derived:?}"
                ));
            }
        }
        table.check_invariants(locks)?;
        Ok(table)
    }

    /// Every invariant the table keeps after every apply; `Err` names the first broken one.
    /// Reads every operation and the locks of assigned ones.
    pub(crate) fn check_invariants(&self, locks: &LockTable) -> Result<(), String> {
        let mut epochs = BTreeSet::new();
        let mut assigned: BTreeMap<&str, BTreeSet<OperationId>> = BTreeMap::new();
        for op in self.ops.values() {
            check_operation(op, locks)?;
            if op.epoch != 0 && !epochs.insert(op.epoch) {
                return Err(format!("{}: epoch {} is used twice", op.id, op.epoch));
            }
            if op.state.is_assigned() {
                let worker = op.worker.as_deref().unwrap_or_default();
                assigned.entry(worker).or_default().insert(op.id);
            }
        }
        for (id, worker) in &self.workers {
            let ids = assigned.remove(id.as_str()).unwrap_or_default();
            if worker.assigned != ids {
                return Err(format!(
                    "worker {id}: assigned {:?} but its operations say {ids:?}",
                    worker.assigned
                ));
            }
        }
        if let Some((worker, ids)) = assigned.into_iter().next() {
            return Err(format!(
                "operations {ids:?} are assigned to {worker:?}, which is not registered"
            ));
        }
        Ok(())
    }
}

/// One operation's own invariants: its fields agree with its state, its epoch was issued, and
/// its lock grant exists exactly while it is assigned.
pub(crate) fn check_operation(op: &Operation, locks: &LockTable) -> Result<(), String> {
    let id = op.id;
    let assigned = op.state.is_assigned();
    if op.attempt == 0 || op.attempt > op.policy.max_attempts {
        return Err(format!(
            "{id}: attempt {} outside 1..={}",
            op.attempt, op.policy.max_attempts
        ));
    }
    if assigned && (op.worker.is_none() || op.epoch == 0) {
        return Err(format!("{id}: {} without a worker and epoch", op.state));
    }
    if op.state == OpState::Queued && op.worker.is_some() {
        return Err(format!("{id}: queued but assigned to {:?}", op.worker));
    }
    if op.epoch > locks.last_token() {
        return Err(format!(
            "{id}: epoch {} above the last token {}",
            op.epoch,
            locks.last_token()
        ));
    }
    if op.transitions.last().map(|t| t.state) != Some(op.state) {
        return Err(format!(
            "{id}: the last transition is not its state {}",
            op.state
        ));
    }
    let Some(lock) = &op.policy.lock else {
        return Ok(());
    };
    let grants = locks.get(&lock.name).map_or(&[][..], |l| &l.holders[..]);
    let mine: Vec<_> = grants.iter().filter(|h| h.operation == Some(id)).collect();
    match (assigned, mine.as_slice()) {
        (false, []) => Ok(()),
        (true, [h])
            if Some(&h.holder) == op.lock_holder().as_ref()
                && h.token == op.epoch
                && h.mode == lock.mode
                && h.expires_at_ms.is_none() =>
        {
            Ok(())
        }
        _ => Err(format!(
            "{id}: {} with grants {mine:?} on lock {}",
            op.state, lock.name
        )),
    }
}
