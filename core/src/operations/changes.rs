//! The table-only changes of operations and workers: store an operation, move it between
//! states, evict ended ones; add, refresh and remove workers. Each keeps the derived indexes and
//! every worker's `assigned` set in step with the records.
//!
//! These check nothing: `operations/apply.rs` runs every rule (and takes or releases the lock)
//! first, and calls these only once the step can no longer fail.

use std::sync::Arc;

use super::{OpResult, OpState, Operation, OperationTable, Transition, Worker};

impl Operation {
    /// Records that it is now in `state` at `now_ms`.
    pub(crate) fn enter(&mut self, state: OpState, now_ms: u64) {
        self.state = state;
        self.transitions.push(Transition {
            state,
            time_ms: now_ms,
            attempt: self.attempt,
            worker: self.worker.clone().filter(|_| state.is_assigned()),
        });
    }

    /// Queued -> Dispatched to `worker` with the assignment's `epoch`.
    pub(crate) fn assign(&mut self, worker: &str, epoch: u64, now_ms: u64) {
        debug_assert_eq!(self.state, OpState::Queued);
        self.worker = Some(worker.to_string());
        self.epoch = epoch;
        self.enter(OpState::Dispatched, now_ms);
    }

    /// An assignment taken back: queued again for the next attempt.
    pub(crate) fn requeue(&mut self, now_ms: u64) {
        debug_assert!(self.state.is_assigned());
        self.attempt = self.attempt.saturating_add(1);
        self.worker = None;
        self.enter(OpState::Queued, now_ms);
    }

    /// Ends it in `state` (a final one) with `result` (`None` keeps the one it has).
    pub(crate) fn end(&mut self, state: OpState, result: Option<OpResult>, now_ms: u64) {
        debug_assert!(state.is_final());
        if result.is_some() {
            self.result = result;
        }
        self.enter(state, now_ms);
    }
}

impl OperationTable {
    /// Stores `op` (new, or the next version of a stored one) and re-indexes it. Returns the
    /// stored operation, shared with the `OpEvent` that reports the change.
    pub(crate) fn put(&mut self, op: Operation) -> Arc<Operation> {
        if let Some(previous) = self.ops.get(&op.id).cloned() {
            self.unindex(&previous);
        }
        let op = Arc::new(op);
        self.insert(op.clone());
        op
    }

    /// Adds `op` and its index entries (the id must be new, or unindexed).
    pub(super) fn insert(&mut self, op: Arc<Operation>) {
        let id = op.id;
        if let Some(key) = &op.idempotency_key {
            self.keys.insert(key.clone(), id);
        }
        if op.state.is_final() {
            self.finished.insert((op.last_change_ms(), id));
        } else {
            self.active.insert((op.target.clone(), id));
        }
        if op.state == OpState::Queued {
            self.queued.insert(id);
        }
        if let Some(at) = deadline_entry(&op) {
            self.deadlines.insert((at, id));
        }
        if let Some(worker) = assigned_worker(&op).and_then(|w| self.workers.get_mut(w)) {
            worker.assigned.insert(id);
        }
        self.ops.insert(id, op);
    }

    /// Removes `op`'s index entries (not the operation).
    fn unindex(&mut self, op: &Operation) {
        let id = op.id;
        if let Some(key) = &op.idempotency_key {
            self.keys.remove(key);
        }
        self.finished.remove(&(op.last_change_ms(), id));
        self.active.remove(&(op.target.clone(), id));
        self.queued.remove(&id);
        if let Some(at) = deadline_entry(op) {
            self.deadlines.remove(&(at, id));
        }
        if let Some(worker) = assigned_worker(op).and_then(|w| self.workers.get_mut(w)) {
            worker.assigned.remove(&id);
        }
    }

    /// Forgets ended operations, the earliest ended first, until at most `keep` remain.
    /// Returns how many were forgotten (their idempotency keys are free again).
    pub(crate) fn evict_finished(&mut self, keep: usize) -> usize {
        let mut evicted = 0;
        while self.finished.len() > keep {
            let Some((_, id)) = self.finished.remove_min() else {
                break;
            };
            if let Some(op) = self.ops.remove(&id) {
                self.unindex(&op);
            }
            evicted += 1;
        }
        evicted
    }

    /// Registers a new worker.
    pub(crate) fn add_worker(&mut self, worker: Worker) {
        debug_assert!(worker.assigned.is_empty());
        self.expiries
            .insert((worker.expires_at_ms(), worker.id.clone()));
        self.workers.insert(worker.id.clone(), worker);
    }

    /// Changes a registered worker (never its assignments) and re-indexes its expiry. Returns
    /// it after the change, or `None` if it is not registered.
    pub(crate) fn update_worker(
        &mut self,
        id: &str,
        change: impl FnOnce(&mut Worker),
    ) -> Option<Worker> {
        let worker = self.workers.get_mut(id)?;
        self.expiries
            .remove(&(worker.expires_at_ms(), id.to_string()));
        change(worker);
        self.expiries
            .insert((worker.expires_at_ms(), id.to_string()));
        Some(worker.clone())
    }

    /// Removes a worker that has no assignments left.
    pub(crate) fn remove_worker(&mut self, id: &str) -> Option<Worker> {
        let worker = self.workers.remove(id)?;
        debug_assert!(worker.assigned.is_empty(), "removed {id} with assignments");
        self.expiries
            .remove(&(worker.expires_at_ms(), id.to_string()));
        Some(worker)
    }

    pub(crate) fn worker_count(&self) -> usize {
        self.workers.len()
    }
}

/// The deadline a sweep may still act on: not for ended operations, nor for aborting ones (their
/// worker's confirmation, or its death, ends them).
fn deadline_entry(op: &Operation) -> Option<u64> {
    let open = matches!(
        op.state,
        OpState::Queued | OpState::Dispatched | OpState::InProgress
    );
    op.deadline_at_ms.filter(|_| open)
}

fn assigned_worker(op: &Operation) -> Option<&str> {
    op.worker.as_deref().filter(|_| op.state.is_assigned())
}
