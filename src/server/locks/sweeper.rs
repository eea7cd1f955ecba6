//! The leader's lock sweeper: expires holders and waiters past their time, ends lock-delays and
//! grants the queues behind them, by proposing `LockCommand::Sweep`s; apply re-checks everything.

use crate::server::node::Node;
use crate::state::LockCommand;
use crate::state::LockReply;
use crate::state::Response;
use crate::state::State;
use std::sync::Arc;
use std::time::Duration;

/// The leader's sweeper: every `locks.sweep_interval_ms`, if this node leads, proposes a
/// `LockSweep` naming the locks its clock says are due. Apply re-checks each with leader time,
/// once its term's first stamped entry is applied (`TERM_GRACE_MS` after it: none).
///
/// An empty sweep is also the leader's checkpoint of cluster time: one at the start of its
/// term, and one whenever the log had no stamped entry for `time.checkpoint_interval_ms` while
/// anything is timed.
pub async fn run_sweeper(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.locks.sweep_interval_ms);
    let checkpoint_ms = node.config.time.checkpoint_interval_ms;
    let grace_ms = node.term_grace_ms();
    let lock_delay_ms = node.config.locks.lock_delay_ms;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let quiet_ms = node.time.quiet_ms();
        let Some(round) = node.sweep_due(grace_ms, |state, now| {
            sweep_round(state, now, quiet_ms, checkpoint_ms, grace_ms, lock_delay_ms)
        }) else {
            continue;
        };
        if round.started {
            node.term_clock_started();
        }
        let Some(command) = round.command else {
            continue;
        };
        if round.checkpoint {
            node.metrics.time_checkpoints.inc();
        }
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

/// What one round of the sweeper decided.
#[derive(Clone, Debug)]
pub struct SweepRound {
    /// The sweep to propose, if any.
    pub command: Option<LockCommand>,
    /// This leader's term clock has started (its first stamped entry is applied).
    pub started: bool,
    /// The sweep is only a checkpoint of cluster time (nothing due).
    pub checkpoint: bool,
}

/// One round of the sweeper at cluster time `now` on a leader whose sweeps apply would let act
/// (`Node::sweep_due`); `quiet_ms`: how long since this node last applied a stamped entry.
/// Also the simulator's sweeper (sim/), so both decide alike.
///
/// A new leader's first stamped entry starts its term's clock (core's `start_term_clock`) and
/// expires nothing. On a quiet cluster, waiting for something to be due before proposing it
/// would add a second sweep to every end after an election; an empty sweep starts it at
/// takeover (README "Time", bound 2).
///
/// Every node counts cluster time from the last stamped entry it applied, from when that entry
/// reached its log, or, when that is not known (a restart replays its log, a snapshot is
/// installed), from when it applied it. One that applied it late counts behind, by how late,
/// until the next stamped entry; were it to lead before one came, every end would be that much
/// late. So the leader checkpoints while anything is timed and the log was quiet (README
/// "Time", bound 2).
pub fn sweep_round(
    state: &State,
    now: u64,
    quiet_ms: Option<u64>,
    checkpoint_ms: u64,
    grace_ms: u64,
    lock_delay_ms: u64,
) -> SweepRound {
    let names = state.locks_due(now);
    let started = state.term_started_ms().is_some();
    let timed = state.next_due_ms().is_some();
    let checkpoint =
        names.is_empty() && started && timed && quiet_ms.is_some_and(|q| q >= checkpoint_ms);
    let idle = names.is_empty() && started && !checkpoint;
    SweepRound {
        command: (!idle).then_some(LockCommand::Sweep {
            names,
            grace_ms,
            lock_delay_ms,
        }),
        started,
        checkpoint,
    }
}
