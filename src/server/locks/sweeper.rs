//! The leader's lock sweeper: expires holders and waiters past their time, ends lock-delays and
//! grants the queues behind them, by proposing `LockCommand::Sweep`s; apply re-checks everything.

use crate::server::node::Node;
use crate::state::LockCommand;
use crate::state::LockReply;
use crate::state::Response;
use std::sync::Arc;
use std::time::Duration;

/// The leader's sweeper: every `locks.sweep_interval_ms`, if this node leads, proposes a
/// `LockSweep` naming the locks its clock says are due. Apply re-checks each with leader time,
/// once its term's first stamped entry is applied (`TERM_GRACE_MS` after it: none).
pub async fn run_sweeper(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.locks.sweep_interval_ms);
    let grace_ms = crate::server::node::TERM_GRACE_MS;
    let lock_delay_ms = node.config.locks.lock_delay_ms;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some((names, started)) = node.sweep_due(grace_ms, |state, now| {
            (state.locks_due(now), state.term_started_ms().is_some())
        }) else {
            continue;
        };
        // A new leader's first stamped entry starts its term's clock (core's
        // `start_term_clock`) and expires nothing. On a quiet cluster, waiting for something to
        // be due before proposing it would add a second sweep to every end after an election;
        // an empty sweep starts it at takeover (README "Time", bound 2).
        if names.is_empty() && started {
            continue;
        }
        let command = LockCommand::Sweep {
            names,
            grace_ms,
            lock_delay_ms,
        };
        match node.propose_local(command.into()).await {
            Ok(Response::Locks(LockReply::Swept {
                expired,
                waiters_expired,
                granted,
            })) => {
                tracing::debug!(expired, waiters_expired, granted, "lock sweep applied");
            }
            Ok(_) => {}
            Err(_) => tracing::debug!("lock sweep not applied (leadership changed)"),
        }
    }
}
