//! What `Cluster.Status` and `Cluster.MemberList` learn from each node: its own view, asked of
//! every member at once within the caller's deadline, and the warnings drawn from the answers.

use std::time::Duration;

use tonic::Request;

use super::ClusterService;
use crate::proto::raft_v1::NodeStatusRequest;
use crate::proto::v1::*;
use crate::raft::network::decode;
use crate::raft::types::{NodeAddr, NodeId};
use crate::server::peer::NodeView;
use crate::server::space::{self};

/// A node whose applied index is more than this many entries behind the leader's commit
/// index is reported as behind by `steward cluster status`.
pub const STATUS_LAG_WARN_ENTRIES: u64 = 1_000;

/// A node whose data_dir file system is more than this full (percent) is reported as filling.
pub const STATUS_DISK_WARN_PERCENT: u64 = 90;

/// A node whose data directory is at this share of its `limits.quota_bytes` (percent) or more
/// is reported as nearing its quota.
pub const STATUS_QUOTA_WARN_PERCENT: u64 = 80;

/// What `Cluster.Status` warns about, from the nodes' answers (see `ClusterStatusReply`);
/// `clock_offset_ms_max` is `time.clock_offset_ms_max`.
pub fn status_warnings(
    nodes: &[NodeStatus],
    leader_id: u64,
    clock_offset_ms_max: u64,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let voters: Vec<&NodeStatus> = nodes.iter().filter(|n| n.voter).collect();
    let quorum = voters.len() / 2 + 1;
    let healthy = voters.iter().filter(|n| n.serving).count();
    if leader_id == 0 || !nodes.iter().any(|n| n.id == leader_id && n.serving) {
        warnings.push("no leader serving: writes and linearizable reads wait".to_string());
    }
    if !voters.is_empty() {
        if healthy < quorum {
            warnings.push(format!(
                "no quorum: {healthy} of {} voters serving, {quorum} needed",
                voters.len()
            ));
        } else if healthy == quorum {
            warnings.push(format!(
                "no quorum margin: {healthy} of {} voters serving, {quorum} needed; losing one \
                 more stops writes",
                voters.len()
            ));
        }
    }
    let commit = nodes
        .iter()
        .find(|n| n.id == leader_id)
        .map_or(0, |n| n.committed_index);
    for n in nodes {
        if n.state == "unreachable" {
            warnings.push(format!("node {} is unreachable: {}", n.id, n.error));
            continue;
        }
        if !n.serving {
            warnings.push(format!(
                "node {} is not serving (it cannot answer a linearizable read)",
                n.id
            ));
        }
        let behind = commit.saturating_sub(n.applied_index);
        if behind > STATUS_LAG_WARN_ENTRIES {
            warnings.push(format!(
                "node {} is behind: applied index {}, {behind} entries behind the leader's \
                 commit index {commit} (STATUS_LAG_WARN_ENTRIES = {STATUS_LAG_WARN_ENTRIES})",
                n.id, n.applied_index
            ));
        }
        if let Some(percent) = n.data_bytes.saturating_mul(100).checked_div(n.quota_bytes) {
            if percent >= STATUS_QUOTA_WARN_PERCENT {
                warnings.push(format!(
                    "node {}'s data dir is at {percent}% of limits.quota_bytes ({} of {}; \
                     STATUS_QUOTA_WARN_PERCENT = {STATUS_QUOTA_WARN_PERCENT}): delete what is \
                     no longer needed and run steward compact",
                    n.id,
                    space::bytes(n.data_bytes),
                    space::bytes(n.quota_bytes)
                ));
            }
        }
        if n.disk_total_bytes > 0 {
            let used = n.disk_total_bytes.saturating_sub(n.disk_free_bytes);
            let percent = used.saturating_mul(100) / n.disk_total_bytes;
            if percent > STATUS_DISK_WARN_PERCENT {
                warnings.push(format!(
                    "node {}'s disk is filling: {percent}% used, {} MiB free \
                     (STATUS_DISK_WARN_PERCENT = {STATUS_DISK_WARN_PERCENT})",
                    n.id,
                    n.disk_free_bytes >> 20
                ));
            }
        }
    }
    warnings.extend(clock_warnings(nodes, clock_offset_ms_max));
    warnings
}

/// A line for each node whose wall clock, as it answered, is further than
/// `clock_offset_ms_max` from the middle (median) of the answering nodes' clocks. The answers
/// were read at about the same moment (one fan-out), so their differences are the clocks'.
fn clock_warnings(nodes: &[NodeStatus], clock_offset_ms_max: u64) -> Vec<String> {
    let answered: Vec<&NodeStatus> = nodes
        .iter()
        .filter(|n| n.state != "unreachable" && n.wall_ms > 0)
        .collect();
    let mut walls: Vec<u64> = answered.iter().map(|n| n.wall_ms).collect();
    walls.sort_unstable();
    let Some(middle) = walls.get(walls.len().saturating_sub(1) / 2).copied() else {
        return Vec::new();
    };
    answered
        .iter()
        .filter_map(|n| {
            let (distance, way) = if n.wall_ms >= middle {
                (n.wall_ms - middle, "ahead of")
            } else {
                (middle - n.wall_ms, "behind")
            };
            (distance > clock_offset_ms_max).then(|| {
                format!(
                    "node {}'s wall clock is {distance} ms {way} the middle of the nodes' clocks \
                     (time.clock_offset_ms_max = {clock_offset_ms_max}): shown times follow \
                     the middle; no TTL reads wall clocks",
                    n.id
                )
            })
        })
        .collect()
}

/// How long a status fan-out waits for one node, at most: less when the caller's deadline is
/// nearer (`deadline::budget`), so a paused node never keeps the answer from a caller.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);
/// What a fan-out leaves of the caller's deadline for its answer's way back, at most.
const STATUS_ANSWER_MARGIN_MAX: Duration = Duration::from_millis(100);

impl ClusterService {
    /// Asks one node for its own view, waiting `wait` at most; this node answers from memory.
    pub(crate) async fn node_view(
        &self,
        id: NodeId,
        addr: &NodeAddr,
        wait: Duration,
    ) -> Result<NodeView, String> {
        if id == self.node.id {
            return Ok(NodeView::of(&self.node));
        }
        let mut client = self
            .node
            .channels
            .peer(&addr.peer_addr)
            .map_err(|e| e.to_string())?;
        let mut req = Request::new(NodeStatusRequest {});
        req.set_timeout(wait);
        // The timeout here, not only in the request: a stopped (SIGSTOP) node's kernel still
        // completes the connection, and then nothing answers.
        let silent = || format!("no answer within {} ms", wait.as_millis());
        let reply = tokio::time::timeout(wait, client.node_status(req))
            .await
            .map_err(|_| silent())?
            .map_err(|s| match s.code() {
                // tonic's own end of the request's timeout, racing ours.
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => silent(),
                _ => s.message().to_string(),
            })?;
        decode(&reply.into_inner().data).map_err(|e| e.to_string())
    }

    /// Every member's view, asked of all at once; a member that has not answered when the
    /// caller's deadline is near (or after `STATUS_TIMEOUT`) is given as an error.
    pub(super) async fn all_views(
        &self,
    ) -> Vec<(NodeId, NodeAddr, bool, Result<NodeView, String>)> {
        let wait = crate::server::deadline::budget(STATUS_TIMEOUT, STATUS_ANSWER_MARGIN_MAX)
            .min(STATUS_TIMEOUT);
        let members = self.members();
        let futures = members.iter().map(|(id, (addr, voter))| async move {
            (
                *id,
                addr.clone(),
                *voter,
                self.node_view(*id, addr, wait).await,
            )
        });
        futures::future::join_all(futures).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u64, applied: u64) -> NodeStatus {
        NodeStatus {
            id,
            state: if id == 1 { "leader" } else { "follower" }.into(),
            voter: true,
            serving: true,
            committed_index: 5_000,
            applied_index: applied,
            disk_total_bytes: 100 << 30,
            disk_free_bytes: 50 << 30,
            ..NodeStatus::default()
        }
    }

    #[test]
    fn a_healthy_cluster_has_no_warnings() {
        let nodes = [node(1, 5_000), node(2, 4_990), node(3, 5_000)];
        assert_eq!(status_warnings(&nodes, 1, 500), Vec::<String>::new());
    }

    #[test]
    fn each_problem_gets_one_line() {
        let mut behind = node(2, 3_000);
        behind.disk_free_bytes = 5 << 30;
        let down = NodeStatus {
            id: 3,
            state: "unreachable".into(),
            voter: true,
            error: "connection refused".into(),
            ..NodeStatus::default()
        };
        let warnings = status_warnings(&[node(1, 5_000), behind, down], 1, 500);
        assert_eq!(
            warnings,
            vec![
                "no quorum margin: 2 of 3 voters serving, 2 needed; losing one more stops writes",
                "node 2 is behind: applied index 3000, 2000 entries behind the leader's commit \
                 index 5000 (STATUS_LAG_WARN_ENTRIES = 1000)",
                "node 2's disk is filling: 95% used, 5120 MiB free (STATUS_DISK_WARN_PERCENT = 90)",
                "node 3 is unreachable: connection refused",
            ]
        );
    }

    #[test]
    fn no_leader_and_no_quorum_are_named() {
        let mut lone = node(2, 5_000);
        lone.serving = false;
        let down = |id| NodeStatus {
            id,
            state: "unreachable".into(),
            voter: true,
            error: "timeout".into(),
            ..NodeStatus::default()
        };
        let warnings = status_warnings(&[down(1), lone, down(3)], 1, 500);
        assert_eq!(
            warnings[0],
            "no leader serving: writes and linearizable reads wait"
        );
        assert_eq!(warnings[1], "no quorum: 0 of 3 voters serving, 2 needed");
        assert!(warnings
            .contains(&"node 2 is not serving (it cannot answer a linearizable read)".to_string()));
        // A learner does not count towards the quorum.
        let mut learner = node(4, 5_000);
        learner.voter = false;
        let nodes = [node(1, 5_000), node(2, 5_000), node(3, 5_000), learner];
        assert_eq!(status_warnings(&nodes, 1, 500), Vec::<String>::new());
    }

    #[test]
    fn a_wall_clock_far_from_the_middle_is_named() {
        let at = |id, wall_ms| NodeStatus {
            wall_ms,
            ..node(id, 5_000)
        };
        let t0 = 1_800_000_000_000;
        let near = [at(1, t0), at(2, t0 + 400), at(3, t0 - 300)];
        assert_eq!(status_warnings(&near, 1, 500), Vec::<String>::new());
        let stepped = [at(1, t0 + 3_600_000), at(2, t0 + 20), at(3, t0)];
        assert_eq!(
            status_warnings(&stepped, 1, 500),
            vec![
                "node 1's wall clock is 3599980 ms ahead of the middle of the nodes' clocks \
                 (time.clock_offset_ms_max = 500): shown times follow the middle; no TTL reads \
                 wall clocks"
            ]
        );
        // An unreachable node, or one that does not say, has no clock to compare.
        let mut quiet = at(3, 0);
        quiet.state = "unreachable".into();
        let two = [at(1, t0), at(2, t0 + 900), quiet];
        let clocks: Vec<String> = status_warnings(&two, 1, 500)
            .into_iter()
            .filter(|w| w.contains("wall clock"))
            .collect();
        assert_eq!(clocks.len(), 1, "{clocks:?}");
        assert!(
            clocks[0].starts_with("node 2's wall clock is 900 ms ahead"),
            "{clocks:?}"
        );
    }
}
