//! The leader's lock sweeper: expires holders and waiters past their time, ends lock-delays and
//! grants the queues behind them, by proposing `LockCommand::Sweep`s; apply re-checks everything.

use crate::server::node::Node;
use crate::state::LockCommand;
use crate::state::LockReply;
use crate::state::{Response, State};
use std::sync::Arc;
use std::time::Duration;

/// The leader's sweeper: every `locks.sweep_interval_ms`, if this node leads, proposes a
/// `LockSweep` naming the locks its clock says are due. Apply re-checks each with leader time,
/// after the grace of one election timeout that follows every change of leader.
pub async fn run_sweeper(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.locks.sweep_interval_ms);
    let grace_ms = node.config.raft.election_timeout_ms_max;
    let lock_delay_ms = node.config.locks.lock_delay_ms;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some(names) = node.sweep_due(grace_ms, State::locks_due) else {
            continue;
        };
        if names.is_empty() {
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
