//! The leader's Mason task: submits the construct operation of each fulfilled virtual resource and
//! proposes `Constructed` once it ended; apply decides everything else.

use crate::server::node::Node;
use crate::state::pools::{MasonDue, PoolAction, CONSTRUCT_KIND};
use crate::state::OperationReply;
use crate::state::{self, Command, Response, State};
use crate::state::{OperationCommand, PoolCommand};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The leader's Mason task: whenever a pool command or an operation changes something (and at
/// least every `pools.reap_interval_ms`), if this node leads, submits the construct operation of
/// each virtual resource that was fulfilled (its idempotency key makes a repeat harmless) and
/// proposes `Constructed` for each whose operation ended. Apply decides everything else.
pub async fn run_mason(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    use tokio::sync::broadcast::error::TryRecvError;
    let interval = Duration::from_millis(node.config.pools.reap_interval_ms);
    let grace_ms = node.term_grace_ms();
    let config = node.config.operations();
    let verb = node.config.pools.construct_verb.clone();
    let mut pools = node.hub.subscribe_pools();
    let mut ops = node.hub.subscribe_ops();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = pools.recv() => {}
            _ = ops.recv() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = pools.try_recv() {}
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = ops.try_recv() {}
        let Some(due) = node.sweep_due(0, State::mason_due) else {
            continue;
        };
        for item in due {
            let (name, command) = match item {
                MasonDue::Submit { name, key, params } => {
                    let target =
                        state::ObjectKey::new(CONSTRUCT_KIND, state::DEFAULT_NAMESPACE, &name);
                    let policy = crate::server::operations::policy(config, &target, &verb, 0, 0);
                    let command = OperationCommand::Submit {
                        target,
                        verb: verb.clone(),
                        params,
                        idempotency_key: Some(key),
                        create: None,
                        policy,
                        limits: crate::server::operations::op_limits(config),
                    };
                    (name, Command::from(command))
                }
                MasonDue::Ended { name } => {
                    let command = PoolCommand {
                        action: PoolAction::Constructed { name: name.clone() },
                        grace_ms,
                    };
                    (name, Command::from(command))
                }
            };
            let what = command.to_string();
            let span = tracing::debug_span!("mason", node = node.id, resource = %name);
            match node.propose_local(command).instrument(span).await {
                Ok(Response::Rejected(r)) => tracing::debug!(%name, reason = %r, "{what} refused"),
                Ok(Response::Operations(OperationReply::Submitted { operation, .. })) => {
                    tracing::info!(%name, id = %operation.id, "construct operation submitted");
                }
                Ok(_) => tracing::info!(%name, "virtual resource construction ended"),
                Err(_) => tracing::debug!(%name, "{what} not applied (leadership changed)"),
            }
        }
    }
}
