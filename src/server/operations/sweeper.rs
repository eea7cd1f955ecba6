//! The leader's operation sweeper: takes back the work of dead workers and acts on passed deadlines,
//! by proposing `OperationCommand::Sweep`s; apply re-checks everything.

use crate::config::OperationsConfig;
use crate::server::node::Node;
use crate::server::operations::{op_limits, policy};
use crate::state::OperationReply;
use crate::state::{OperationCommand, ReservationCommand};
use crate::state::{Response, State};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The leader's operation sweeper: every `operations.sweep_interval_ms`, if this node leads,
/// proposes an `OpSweep` of the dead workers and passed deadlines its clock sees.
pub async fn run_op_sweeper(node: Arc<Node>, stop: tokio::sync::watch::Receiver<bool>) {
    let config = node.config.operations();
    let interval = Duration::from_millis(config.sweep_interval_ms);
    let grace_ms = node.term_grace_ms();
    let limits = op_limits(config);
    let mut rounds = node.leader_rounds(interval, stop);
    while rounds.next().await {
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
