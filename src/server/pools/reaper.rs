//! The leader's pool reaper: resets leases whose state expired, expires waiting acquires past their
//! deadline, and reconciles dynamic pools, by proposing pool commands; apply re-checks everything.

use crate::server::node::Node;
use crate::state::pools::PoolAction;
use crate::state::PoolCommand;
use crate::state::{self, Response, State};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The leader's reaper: every `pools.reap_interval_ms`, if this node leads and its term's
/// first stamped entry is applied (`TERM_GRACE_MS` after it), proposes a `Reset` (to `pools.reset_state`) of the leases whose
/// state's expiry passed at its clock, the expiry of waits past their deadline, and a
/// `Reconcile` when a dynamic pool's resource outlived its lifespan. Apply re-checks each
/// against the entry's time.
pub async fn run_reaper(node: Arc<Node>, stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.pools.reap_interval_ms);
    let grace_ms = node.term_grace_ms();
    let dest = node.config.pools.reset_state.clone();
    let mut rounds = node.leader_rounds(interval, stop);
    while rounds.next().await {
        if let Some(claims) = node.sweep_due(0, State::pool_claims_expired) {
            if !claims.is_empty() {
                let command = PoolCommand {
                    action: PoolAction::ExpireClaims { claims },
                    grace_ms,
                };
                if node.propose_local(command.into()).await.is_err() {
                    tracing::debug!("claim expiry not applied (leadership changed)");
                }
            }
        }
        if node.sweep_due(0, State::pools_reconcile_due) == Some(true) {
            let command = PoolCommand {
                action: PoolAction::Reconcile,
                grace_ms,
            };
            if node.propose_local(command.into()).await.is_err() {
                tracing::debug!("dynamic pool reconcile not applied (leadership changed)");
            }
        }
        let Some(names) = node.sweep_due(grace_ms, State::pools_expired) else {
            continue;
        };
        if names.is_empty() {
            continue;
        }
        let command = PoolCommand {
            action: PoolAction::Reset {
                names,
                dest: dest.clone(),
            },
            grace_ms,
        };
        let span = tracing::debug_span!("pool_reap", node = node.id);
        match node.propose_local(command.into()).instrument(span).await {
            Ok(Response::Objects(state::ObjectReply::Txn { objects, .. })) => {
                for o in &objects {
                    tracing::info!(name = %o.metadata.name, "pool lease expired; reset");
                }
            }
            Ok(Response::Rejected(r)) => tracing::debug!(reason = %r, "pool reset refused"),
            Ok(_) => {}
            Err(_) => tracing::debug!("pool reset not applied (leadership changed)"),
        }
    }
}
