//! etcd's auto-compaction (`[etcd] auto_compaction_mode`, `auto_compaction_retention`): a
//! leader-only loop that proposes `KvCommand::Compact`, as etcd's compactor does.
//!
//! - "periodic": keep `retention` of history. Every tenth of the retention (at most an hour
//!   apart) the leader notes the store's revision at its cluster time, and compacts to the
//!   newest revision it noted at least `retention` ago. A new leader starts noting afresh, so it
//!   compacts nothing until a retention has passed on its watch: never more than asked.
//! - "revision": keep `retention` revisions: every `auto_compaction_interval_ms`, compact to the
//!   store's revision minus it.
//!
//! Apply refuses a compaction at or below the last one, so a stale proposal changes nothing.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::config::AutoCompaction;
use crate::server::node::Node;
use crate::state::kv::{KvCommand, KvReply};
use crate::state::Response;

/// Runs until `stop`; returns at once when auto-compaction is off.
pub async fn run_compactor(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let policy = match node.config.etcd.auto_compaction() {
        Ok(Some(policy)) => policy,
        // Off; or invalid, which config validation refused before the node started.
        Ok(None) | Err(_) => return,
    };
    let every = match policy {
        AutoCompaction::Periodic { retention_ms } => (retention_ms / 10).clamp(100, 3_600_000),
        AutoCompaction::Revision { .. } => node.config.etcd.auto_compaction_interval_ms,
    };
    // (cluster time, store revision) noted while leading, oldest first.
    let mut noted: VecDeque<(u64, u64)> = VecDeque::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(every)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some((now, _term)) = node.leader_now() else {
            noted.clear();
            continue;
        };
        let (revision, compacted) = {
            let state = node.state();
            (state.revision(), state.kv().compacted())
        };
        let target = match policy {
            AutoCompaction::Periodic { retention_ms } => {
                noted.push_back((now, revision));
                let cutoff = now.saturating_sub(retention_ms);
                // Keep the newest note at or before the cutoff, and everything after it.
                while noted.len() > 1 && noted.get(1).is_some_and(|(t, _)| *t <= cutoff) {
                    noted.pop_front();
                }
                match noted.front() {
                    Some((t, rev)) if *t <= cutoff => *rev,
                    _ => continue,
                }
            }
            AutoCompaction::Revision { keep } => revision.saturating_sub(keep),
        };
        if target <= compacted || target == 0 {
            continue;
        }
        match node
            .propose_local(KvCommand::Compact { revision: target }.into())
            .await
        {
            Ok(Response::Kv(KvReply::Compacted { .. })) => {
                tracing::info!(revision = target, "etcd keyspace auto-compacted");
            }
            Ok(_) => {}
            Err(_) => tracing::debug!("auto-compaction not applied (leadership changed)"),
        }
    }
}
