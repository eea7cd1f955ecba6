//! The leader's operation tasks: the scheduler, which proposes `OpAssign` for what
//! `State::ops_dispatchable` offers, and the sweeper, which proposes `OpSweep` for what
//! `State::ops_due` names. Both run on every node and act only while this node leads; they only
//! propose, and apply re-checks every proposal (a stale plan is refused, never applied twice).
//!
//! The scheduler wakes on every operation change applied here (a submit, an end that frees a
//! lock or a worker's room) and on a tick of `operations.schedule_interval_ms`, which covers what
//! makes no operation event (a worker registering or coming back with a heartbeat). The sweeper
//! passes the grace of one election timeout, as the lock sweeper does, so a new leader whose
//! clock runs ahead never takes work from a worker that heartbeated to the old one. On the same
//! tick it proposes the decommission of each reservation that has ended or is marked
//! `toDelete` (no grace: a reservation's end is a time, not a lapse of heartbeats).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::TryRecvError;
use tracing::Instrument;

use crate::config::OperationsConfig;
use crate::server::node::Node;
use crate::server::operations::{op_limits, policy};
use crate::state::{Command, LockLimits, Response, State};

fn lock_limits(node: &Node) -> LockLimits {
    let l = &node.config.locks;
    LockLimits {
        holders_max: l.holders_max,
        waiters_max: l.waiters_max,
        locks_max: l.locks_max,
        details_bytes_max: l.details_bytes_max,
    }
}

/// Proposes the assignments the state offers now; returns how many were applied.
async fn schedule_round(node: &Node) -> usize {
    let config = node.config.operations();
    let max = usize::try_from(config.schedule_batch_max).unwrap_or(usize::MAX);
    let lock_limits = lock_limits(node);
    let plan = node
        .state()
        .ops_dispatchable(node.clock.now_ms(), lock_limits.holders_max, max);
    if plan.is_empty() {
        return 0;
    }
    let proposals = plan.into_iter().map(|d| {
        let command = Command::OpAssign {
            id: d.id,
            worker: d.worker,
            lock_limits,
        };
        node.propose_local(command)
    });
    let mut applied = 0;
    for result in futures::future::join_all(proposals).await {
        match result {
            Ok(Response::Operation { operation }) => {
                applied += 1;
                tracing::debug!(id = %operation.id, worker = ?operation.worker, epoch = operation.epoch, "assigned");
            }
            Ok(Response::Rejected(r)) => tracing::debug!(reason = %r, "assignment refused"),
            Ok(_) => {}
            Err(_) => tracing::debug!("assignment not applied (leadership changed)"),
        }
    }
    applied
}

/// The leader's scheduler; see the module docs.
pub async fn run_scheduler(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.operations().schedule_interval_ms);
    let mut events = node.hub.subscribe_ops();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = events.recv() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        // One round covers every change so far.
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = events.try_recv() {}
        if !node.is_leader() {
            continue;
        }
        let span = tracing::debug_span!("schedule", node = node.id);
        schedule_round(&node).instrument(span).await;
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
        node.propose_local(Command::Decommission {
            target,
            verb: verb.clone(),
            policy,
            limits,
        })
    });
    let mut submitted = 0;
    for result in futures::future::join_all(proposals).await {
        match result {
            Ok(Response::OpSubmitted { operation, .. }) => {
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
    let grace_ms = node.config.raft.election_timeout_max_ms;
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
        let command = Command::OpSweep {
            workers: due.workers,
            operations: due.operations,
            grace_ms,
            limits,
        };
        let span = tracing::debug_span!("op_sweep", node = node.id);
        match node.propose_local(command).instrument(span).await {
            Ok(Response::OpSwept { tally }) => tracing::debug!(?tally, "operation sweep applied"),
            Ok(Response::Rejected(r)) => tracing::debug!(reason = %r, "operation sweep refused"),
            Ok(_) => {}
            Err(_) => tracing::debug!("operation sweep not applied (leadership changed)"),
        }
    }
}
