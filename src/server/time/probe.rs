//! The clock probe: every `time.clock_probe_interval_ms`, each node reads every other member's
//! wall clock (the peer `NodeStatus` call, which answers `wall_ms`) and records it in its
//! `ShownClock`. One log line when a node's clock goes further than `time.clock_offset_ms_max`
//! from the middle of the clocks, and one when it comes back. Wall clocks are for display only:
//! nothing here changes any TTL.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::server::cluster::ClusterService;
use crate::server::node::Node;

/// How long one probe waits for a node, at most (less when the interval is shorter).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Probes until `stop`.
pub async fn run_probe(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.time.clock_probe_interval_ms);
    let cluster = ClusterService::new(node.clone());
    let mut reported = BTreeSet::new();
    loop {
        probe(&node, &cluster, interval.min(PROBE_TIMEOUT)).await;
        report(&node, &mut reported);
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Reads every other member's wall clock at once; forgets nodes that are no longer members.
#[tracing::instrument(level = "debug", skip_all, fields(node = node.id))]
async fn probe(node: &Node, cluster: &ClusterService, wait: Duration) {
    let members = cluster.members();
    let clock = node.time.clock();
    let probes =
        members
            .iter()
            .filter(|(id, _)| **id != node.id)
            .map(|(id, (addr, _))| async move {
                let sent = clock.monotonic_ms();
                (*id, sent, cluster.node_view(*id, addr, wait).await)
            });
    for (id, sent, answer) in futures::future::join_all(probes).await {
        match answer {
            // 0: a node from before the wall clock was reported.
            Ok(view) if view.wall_ms > 0 => node.shown.record(id, sent, view.wall_ms),
            Ok(_) => {}
            Err(e) => tracing::debug!(peer = id, error = %e, "clock probe got no answer"),
        }
    }
    for id in node.shown.known() {
        if !members.contains_key(&id) {
            node.shown.forget(id);
        }
    }
}

/// Logs a node's clock going out of `time.clock_offset_ms_max` from the middle, and back.
fn report(node: &Node, reported: &mut BTreeSet<u64>) {
    let outliers = node.shown.outliers(node.id);
    let now: BTreeSet<u64> = outliers.iter().map(|(id, _)| *id).collect();
    for (id, offset_ms) in &outliers {
        if !reported.contains(id) {
            tracing::warn!(
                clock_of = id,
                offset_ms,
                max_ms = node.shown.offset_ms_max(),
                "a node's wall clock is further from the middle of the nodes' clocks than \
                 time.clock_offset_ms_max; shown times follow the middle (TTLs never read \
                 wall clocks)"
            );
        }
    }
    for id in reported.difference(&now) {
        tracing::info!(
            clock_of = id,
            "the node's wall clock is back near the others'"
        );
    }
    *reported = now;
}
