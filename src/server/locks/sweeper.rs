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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{apply, ApplyContext, Command, LockLimits, LockMode, Proposal};

    /// Applies `command` as entry `index` of term 1, stamped `time_ms` by that term's leader.
    fn run(state: &mut State, index: u64, time_ms: u64, command: LockCommand) {
        let proposal = Proposal::new(time_ms, Some(1), None, Command::Locks(command));
        let ctx = ApplyContext::of_proposal(index, 1, &proposal);
        let _ = apply(state, &ctx, &proposal.command, &mut Vec::new());
    }

    fn sweep_names(round: &SweepRound) -> Option<Vec<String>> {
        match &round.command {
            Some(LockCommand::Sweep { names, .. }) => Some(names.clone()),
            Some(other) => panic!("not a sweep: {other:?}"),
            None => None,
        }
    }

    #[test]
    fn a_round_starts_the_term_checkpoints_a_quiet_log_and_sweeps_what_is_due() {
        let mut state = State::new();
        // A leader whose term clock has not started proposes an empty sweep to start it.
        let round = sweep_round(&state, 1_000, None, 500, 0, 0);
        assert_eq!(sweep_names(&round), Some(vec![]));
        assert!(!round.started && !round.checkpoint);

        run(
            &mut state,
            1,
            1_000,
            LockCommand::Sweep {
                names: vec![],
                grace_ms: 0,
                lock_delay_ms: 0,
            },
        );
        // Started, nothing timed: nothing to propose, however quiet the log.
        let round = sweep_round(&state, 1_010, Some(10_000), 500, 0, 0);
        assert!(round.started && round.command.is_none(), "{round:?}");

        run(
            &mut state,
            2,
            1_020,
            LockCommand::Acquire {
                name: "l".into(),
                holder: "h".into(),
                mode: LockMode::Write,
                ttl_ms: Some(100),
                details: serde_json::Value::Null,
                wait_ms: 0,
                limits: LockLimits {
                    holders_max: 10,
                    waiters_max: 10,
                    locks_max: 10,
                    details_bytes_max: 1_024,
                },
            },
        );
        // Timed, not due: a checkpoint only once the log has been quiet that long.
        let round = sweep_round(&state, 1_050, Some(499), 500, 0, 0);
        assert!(round.command.is_none(), "{round:?}");
        let round = sweep_round(&state, 1_050, Some(500), 500, 0, 0);
        assert!(round.checkpoint, "{round:?}");
        assert_eq!(sweep_names(&round), Some(vec![]));
        // Due at 1 120: swept by name, not a checkpoint.
        let round = sweep_round(&state, 1_120, Some(0), 500, 7, 9);
        assert!(!round.checkpoint, "{round:?}");
        assert_eq!(sweep_names(&round), Some(vec!["l".to_string()]));
        assert!(matches!(
            round.command,
            Some(LockCommand::Sweep {
                grace_ms: 7,
                lock_delay_ms: 9,
                ..
            })
        ));
    }
}
