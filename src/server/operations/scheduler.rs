//! The leader's operation scheduler, which proposes `OperationCommand::Assign` for what
//! `State::ops_dispatchable` offers (its sweeper is `sweeper.rs`). It runs on every node and acts
//! only while this node leads; it only proposes, and apply re-checks every proposal (a stale plan
//! is refused, never applied twice).
//!
//! The scheduler wakes on every operation change applied here (a submit, an end that frees a
//! lock or a worker's room), when one of its proposals is answered, and on a tick of
//! `operations.schedule_interval_ms`, which covers what makes no operation event (a worker
//! registering or coming back with a heartbeat). Its proposals are in flight side by side: each
//! round plans besides the ones not answered yet (`State::ops_dispatchable_besides`), so it never
//! offers an operation twice nor a worker more than its room. The sweeper
//! expires on cluster time, as the lock sweeper does (README "Time"), so a new leader never
//! counts ahead of the one a worker heartbeated to. On the same tick it proposes the decommission of each reservation that has ended or is marked
//! `toDelete` (no grace: a reservation's end is a time, not a lapse of heartbeats).

use crate::state::OperationCommand;
use crate::state::OperationReply;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::Notify;
use tracing::Instrument;

use crate::server::node::Node;
use crate::state::{LockLimits, OperationId, Response};

fn lock_limits(node: &Node) -> LockLimits {
    lock_limits_of(&node.config.locks)
}

/// The lock limits an assignment's grant is held to (`[locks]`); the simulator's scheduler
/// round uses them too.
pub fn lock_limits_of(l: &crate::config::LocksConfig) -> LockLimits {
    LockLimits {
        holders_max: l.holders_max,
        waiters_max: l.waiters_max,
        locks_max: l.locks_max,
        details_bytes_max: l.details_bytes_max,
    }
}

/// Assignments proposed and not answered yet (operation -> worker), shared by the scheduler
/// loop and the tasks that await each proposal.
type Pending = Arc<Mutex<BTreeMap<OperationId, String>>>;

fn pending_of(pending: &Pending) -> std::sync::MutexGuard<'_, BTreeMap<OperationId, String>> {
    pending.lock().unwrap_or_else(|e| e.into_inner())
}

/// Proposes the assignments the state offers now besides those still in flight, each from a
/// task of its own: the next round can be planned while these are in the log, so a submit
/// never waits for an earlier round's commit. At most `operations.schedule_batch_max` are in
/// flight; each task wakes the scheduler when its answer is in. Returns how many it proposed.
fn schedule_round(node: &Arc<Node>, pending: &Pending, answered: &Arc<Notify>) -> usize {
    let config = node.config.operations();
    let in_flight_max = usize::try_from(config.schedule_batch_max).unwrap_or(usize::MAX);
    let lock_limits = lock_limits(node);
    let plan = {
        let pending = pending_of(pending);
        let max = in_flight_max.saturating_sub(pending.len());
        if max == 0 {
            return 0;
        }
        node.state().ops_dispatchable_besides(
            node.cluster_now(),
            lock_limits.holders_max,
            max,
            &pending,
        )
    };
    let proposed = plan.len();
    for d in plan {
        pending_of(pending).insert(d.id, d.worker.clone());
        let (node, pending, answered) = (node.clone(), pending.clone(), answered.clone());
        let span = tracing::debug_span!("assign", node = node.id, id = %d.id);
        tokio::spawn(
            async move {
                let command = OperationCommand::Assign {
                    id: d.id,
                    worker: d.worker,
                    lock_limits,
                };
                match node.propose_local(command.into()).await {
                    Ok(Response::Operations(OperationReply::Operation { operation })) => {
                        tracing::debug!(worker = ?operation.worker, epoch = operation.epoch, "assigned");
                        // From the queued transition before the assignment to the assignment.
                        if let [.., queued, assigned] = operation.transitions.as_slice() {
                            let ms = assigned.time_ms.saturating_sub(queued.time_ms);
                            node.metrics.op_dispatch_latency.observe(ms as f64 / 1000.0);
                        }
                    }
                    Ok(Response::Rejected(r)) => tracing::debug!(reason = %r, "assignment refused"),
                    Ok(_) => {}
                    Err(_) => tracing::debug!("assignment not applied (leadership changed)"),
                }
                pending_of(&pending).remove(&d.id);
                answered.notify_one();
            }
            .instrument(span),
        );
    }
    proposed
}

/// The leader's scheduler; see the module docs.
pub async fn run_scheduler(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.operations().schedule_interval_ms);
    let mut events = node.hub.subscribe_ops();
    let pending = Pending::default();
    let answered = Arc::new(Notify::new());
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = events.recv() => {}
            _ = answered.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        // One round covers every change so far.
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = events.try_recv() {}
        if !node.is_leader() {
            continue;
        }
        let _span = tracing::debug_span!("schedule", node = node.id).entered();
        schedule_round(&node, &pending, &answered);
    }
}
