//! The leader's operation tasks: the scheduler, which proposes `OpAssign` for what
//! `State::ops_dispatchable` offers, and the sweeper, which proposes `OpSweep` for what
//! `State::ops_due` names. Both run on every node and act only while this node leads; they only
//! propose, and apply re-checks every proposal (a stale plan is refused, never applied twice).
//!
//! The scheduler wakes on every operation change applied here (a submit, an end that frees a
//! lock or a worker's room), when one of its proposals is answered, and on a tick of
//! `operations.schedule_interval_ms`, which covers what makes no operation event (a worker
//! registering or coming back with a heartbeat). Its proposals are in flight side by side: each
//! round plans besides the ones not answered yet (`State::ops_dispatchable_besides`), so it never
//! offers an operation twice nor a worker more than its room. The sweeper
//! passes the grace of one election timeout, as the lock sweeper does, so a new leader whose
//! clock runs ahead never takes work from a worker that heartbeated to the old one. On the same
//! tick it proposes the decommission of each reservation that has ended or is marked
//! `toDelete` (no grace: a reservation's end is a time, not a lapse of heartbeats).

use crate::state::OperationReply;
use crate::state::{OperationCommand, ReservationCommand};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::Notify;
use tracing::Instrument;

use crate::config::OperationsConfig;
use crate::server::node::Node;
use crate::server::operations::{op_limits, policy};
use crate::state::{LockLimits, OperationId, Response, State};

fn lock_limits(node: &Node) -> LockLimits {
    let l = &node.config.locks;
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
            node.clock.now_ms(),
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

/// Proposes a `Decommission` for each reservation that is due at this leader's clock (one entry
/// each: an operation's id is its entry's index); returns how many were submitted. Apply
/// re-checks each, so a reservation marked by an earlier round is refused, never submitted twice.
async fn decommission_round(node: &Node, config: &OperationsConfig) -> usize {
    let Some(due) = node.sweep_due(0, State::reservations_due) else {
        return 0;
    };
    let limits = op_limits(config);
    let verb = &config.decommission_verb;
    let proposals = due.into_iter().map(|target| {
        let policy = policy(config, &target, verb, 0, 0);
        node.propose_local(
            ReservationCommand::Decommission {
                target,
                verb: verb.clone(),
                policy,
                limits,
            }
            .into(),
        )
    });
    let mut submitted = 0;
    for result in futures::future::join_all(proposals).await {
        match result {
            Ok(Response::Operations(OperationReply::Submitted { operation, .. })) => {
                submitted += 1;
                tracing::info!(id = %operation.id, target = %operation.target, "decommission submitted");
            }
            Ok(Response::Rejected(r)) => tracing::debug!(reason = %r, "decommission refused"),
            Ok(_) => {}
            Err(_) => tracing::debug!("decommission not applied (leadership changed)"),
        }
    }
    submitted
}

/// The leader's operation sweeper: every `operations.sweep_interval_ms`, if this node leads,
/// proposes an `OpSweep` of the dead workers and passed deadlines its clock sees.
pub async fn run_op_sweeper(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let config = node.config.operations();
    let interval = Duration::from_millis(config.sweep_interval_ms);
    let grace_ms = node.config.raft.election_timeout_ms_max;
    let limits = op_limits(config);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        decommission_round(&node, config)
            .instrument(tracing::debug_span!("decommission", node = node.id))
            .await;
        let Some(due) = node.sweep_due(grace_ms, State::ops_due) else {
            continue;
        };
        if due.is_empty() {
            continue;
        }
        let command = OperationCommand::Sweep {
            workers: due.workers,
            operations: due.operations,
            grace_ms,
            limits,
        };
        let span = tracing::debug_span!("op_sweep", node = node.id);
        match node.propose_local(command.into()).instrument(span).await {
            Ok(Response::Operations(OperationReply::Swept { tally })) => {
                tracing::debug!(?tally, "operation sweep applied")
            }
            Ok(Response::Rejected(r)) => tracing::debug!(reason = %r, "operation sweep refused"),
            Ok(_) => {}
            Err(_) => tracing::debug!("operation sweep not applied (leadership changed)"),
        }
    }
}
