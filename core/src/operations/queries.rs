//! Reads of operations and workers, and what the leader's scheduler and sweeper ask.

use std::collections::BTreeMap;

use crate::operations::{Dispatch, OpFilter, Operation, OperationId, OpsDue, Worker};
use crate::state::State;

impl State {
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

    /// The operation table's invariants against the lock table (for tests; a restore checks
    /// them too).
    #[cfg(test)]
    pub(crate) fn check_operations(&self) -> Result<(), String> {
        self.ops.check_invariants(&self.locks)
    }
}
