//! steward's openraft type configuration and the aliases the rest of the crate uses.
//!
//! Every openraft type the crate names goes through this module, so an openraft upgrade touches
//! one place. Nothing outside `crate::raft` should `use openraft::...` directly.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::state::{Proposal, Response};

/// A node id. Ids are chosen by the operator, start at 1, and are never reused once removed.
pub type NodeId = u64;

/// How to reach a node: the peer (Raft) address and the client API address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    /// host:port of the peer service (Raft traffic).
    pub peer_addr: String,
    /// host:port of the client API (Resources, Cluster).
    pub client_addr: String,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer={} client={}", self.peer_addr, self.client_addr)
    }
}

openraft::declare_raft_types!(
    /// The type configuration of steward's Raft group.
    pub TypeConfig:
        D = Proposal,
        R = Response,
        NodeId = NodeId,
        Node = NodeAddr,
        AsyncRuntime = StewardRuntime,
);

/// openraft's tokio runtime, but for where its randomness comes from (`crate::seam::raft_rng`):
/// the operating system on a node, the seed on a simulation thread (sim/). Everything else is
/// tokio's, so openraft's timers read tokio's clock, which the simulator pauses and moves.
pub struct StewardRuntime(openraft::TokioRuntime);

impl fmt::Debug for StewardRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StewardRuntime")
    }
}

type Tokio = openraft::TokioRuntime;

impl openraft::AsyncRuntime for StewardRuntime {
    type JoinError = <Tokio as openraft::AsyncRuntime>::JoinError;
    type JoinHandle<T: openraft::OptionalSend + 'static> =
        <Tokio as openraft::AsyncRuntime>::JoinHandle<T>;
    type Sleep = <Tokio as openraft::AsyncRuntime>::Sleep;
    type Instant = <Tokio as openraft::AsyncRuntime>::Instant;
    type TimeoutError = <Tokio as openraft::AsyncRuntime>::TimeoutError;
    type Timeout<R, T: std::future::Future<Output = R> + openraft::OptionalSend> =
        <Tokio as openraft::AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = rand010::rngs::SmallRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: std::future::Future + openraft::OptionalSend + 'static,
        T::Output: openraft::OptionalSend + 'static,
    {
        Tokio::spawn(future)
    }

    fn sleep(duration: std::time::Duration) -> Self::Sleep {
        Tokio::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        Tokio::sleep_until(deadline)
    }

    fn timeout<R, F: std::future::Future<Output = R> + openraft::OptionalSend>(
        duration: std::time::Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        Tokio::timeout(duration, future)
    }

    fn timeout_at<R, F: std::future::Future<Output = R> + openraft::OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        Tokio::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        Tokio::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        crate::seam::raft_rng()
    }

    type Mpsc = <Tokio as openraft::AsyncRuntime>::Mpsc;
    type Watch = <Tokio as openraft::AsyncRuntime>::Watch;
    type Oneshot = <Tokio as openraft::AsyncRuntime>::Oneshot;
    type Mutex<T: openraft::OptionalSend + 'static> = <Tokio as openraft::AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        StewardRuntime(Tokio::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: std::future::Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

pub use openraft::async_runtime::WatchReceiver;
pub use openraft::{ReadPolicy, ServerState};
pub type ChangeMembers = openraft::ChangeMembers<NodeId, NodeAddr>;
pub type LinearizableReadError = openraft::errors::LinearizableReadError<TypeConfig>;

/// openraft's `(election_timeout_min, election_timeout_max)` for steward's election timeouts.
///
/// steward's `raft.election_timeout_ms_min..max` is the whole time a follower hears no leader
/// before it campaigns. openraft's follower waits two things in a row: a leader lease of its
/// `election_timeout_max` after the last message of a leader (it refuses to vote meanwhile),
/// then a random timeout in `election_timeout_min..election_timeout_max`. So openraft gets half
/// of steward's max for both the lease and the top of its random timeout, and steward's min less
/// that half for the bottom: a follower campaigns `min` to `2 * (max / 2)` (at most `max`) after
/// the last heartbeat it heard. Validation (`Config::validate`) keeps openraft's min above the
/// heartbeat interval and below its max.
pub fn openraft_election_timeouts(r: &crate::config::RaftConfig) -> (u64, u64) {
    let lease = r.election_timeout_ms_max / 2;
    (r.election_timeout_ms_min.saturating_sub(lease), lease)
}

/// openraft's settings from steward's raft config section.
pub fn raft_settings(
    r: &crate::config::RaftConfig,
) -> Result<openraft::Config, openraft::ConfigError> {
    let (election_timeout_min, election_timeout_max) = openraft_election_timeouts(r);
    openraft::Config {
        cluster_name: r.cluster_name.clone(),
        heartbeat_interval: r.heartbeat_interval_ms,
        election_timeout_min,
        election_timeout_max,
        install_snapshot_timeout: r.rpc_timeout_ms * 10,
        max_payload_entries: r.payload_entries_max,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(r.snapshot_logs_since_last),
        max_in_snapshot_log_to_keep: r.log_behind_snapshot_max,
        enable_pre_vote: Some(true),
        // A leader that restarts must win an election again, in a new term. Restored in its
        // old term (openraft's default), it appends after the log it found on disk; a crash may
        // have cut entries it had sent and followers had fsynced (it replicates before its own
        // fsync), so it would write other entries under the same log ids, and followers that
        // hold the old ones keep them (the log ids match): committed entries change. Found by
        // the simulator (sim/, seeds 9, 22 and 26 of its first hunt).
        enable_leader_restore: Some(false),
        ..Default::default()
    }
    .validate()
}

/// Whether node `id`, whose Raft metrics these are, may make a membership change: it leads and
/// is a voter of its own effective membership (of either half of a joint one). A leader that
/// removed itself leads on until the removal is committed, and when it cannot be committed,
/// until another node is elected; openraft must not be handed a change by it then (its debug
/// assertion "Only leader is allowed to call update_effective_membership()", compiled out of
/// steward's builds, says so; without it openraft takes the change). Found by the simulator
/// (sim/, seed 93 of its debug run, before those assertions were turned off: Cargo.toml).
pub fn may_change_membership(m: &RaftMetrics, id: NodeId) -> bool {
    m.state == ServerState::Leader
        && m.current_leader == Some(id)
        && m.membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id)
}

/// The snapshot payload: the serialized state in a file, never in memory (see
/// `crate::raft::snapshot`).
pub type SnapshotData = crate::raft::snapshot::SnapshotFile;

pub type Raft = openraft::Raft<TypeConfig, crate::raft::state_machine::StateMachine>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type LeaderId = openraft::alias::LeaderIdOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
pub type LogState = openraft::storage::LogState<TypeConfig>;
pub type IOFlushed = openraft::storage::IOFlushed<TypeConfig>;
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;
pub type Membership = openraft::Membership<NodeId, NodeAddr>;
pub type RaftError<E = openraft::errors::Infallible> = openraft::errors::RaftError<TypeConfig, E>;
pub type ClientWriteError = openraft::errors::ClientWriteError<TypeConfig>;
pub type ClientWriteResponse = openraft::raft::ClientWriteResponse<TypeConfig>;
pub type CheckIsLeaderError = openraft::errors::LinearizableReadError<TypeConfig>;
pub type ForwardToLeader = openraft::errors::ForwardToLeader<TypeConfig>;
pub type Fatal = openraft::errors::Fatal<TypeConfig>;
pub type QuorumNotEnough = openraft::errors::QuorumNotEnough<TypeConfig>;
pub use openraft::metrics::WaitError;
pub type AppendEntriesRequest = openraft::raft::AppendEntriesRequest<TypeConfig>;
pub type AppendEntriesResponse = openraft::raft::AppendEntriesResponse<TypeConfig>;
/// One answer of a follower on an append stream: the last log id it holds, or why it stopped.
pub type StreamAppendResult = openraft::raft::StreamAppendResult<TypeConfig>;
pub type VoteRequest = openraft::raft::VoteRequest<TypeConfig>;
pub type VoteResponse = openraft::raft::VoteResponse<TypeConfig>;
pub type SnapshotResponse = openraft::raft::SnapshotResponse<TypeConfig>;
pub type TransferLeaderRequest = openraft::raft::TransferLeaderRequest<TypeConfig>;
pub type TransferLeaderResponse = openraft::raft::TransferLeaderResponse<TypeConfig>;

/// About how long `entry`'s JSON is, to size the buffer it is written into once instead of
/// growing it: its proposal's text (written once and kept, `Proposal::json`) plus room for the
/// log id and the payload's wrapping.
pub fn entry_json_len_hint(entry: &Entry) -> usize {
    const WRAPPING: usize = 128;
    match &entry.payload {
        openraft::EntryPayload::Normal(proposal) => {
            proposal.json().map_or(0, |text| text.get().len()) + WRAPPING
        }
        _ => WRAPPING,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Arc;

    /// Node 1's metrics: `state`, the leader it knows, and its effective membership (one
    /// voter set, or two for a joint configuration; nodes 1 to 3 are members).
    fn metrics(state: ServerState, leader: Option<NodeId>, configs: &[&[NodeId]]) -> RaftMetrics {
        let mut m = RaftMetrics::new_initial(1);
        m.state = state;
        m.current_leader = leader;
        let configs: Vec<BTreeSet<NodeId>> = configs
            .iter()
            .map(|c| c.iter().copied().collect())
            .collect();
        m.membership_config = Arc::new(StoredMembership::new(
            None,
            Membership::new_with_defaults(configs, [1, 2, 3]),
        ));
        m
    }

    /// Node 1's state, the leader it knows, its voter sets, whether it may change the
    /// membership, and what the case is.
    type Case = (
        ServerState,
        Option<NodeId>,
        &'static [&'static [NodeId]],
        bool,
        &'static str,
    );

    #[test]
    fn only_a_leader_that_is_a_voter_may_change_membership() {
        use ServerState::*;
        let cases: &[Case] = &[
            (Leader, Some(1), &[&[1, 2, 3]], true, "a leading voter"),
            (
                Leader,
                Some(1),
                &[&[1, 2, 3], &[2, 3]],
                true,
                "removing itself: joint",
            ),
            (Leader, Some(1), &[&[2, 3]], false, "removed itself"),
            (
                Leader,
                Some(1),
                &[&[2, 3], &[2, 3]],
                false,
                "out of both halves",
            ),
            (Follower, Some(2), &[&[1, 2, 3]], false, "a follower"),
            (Candidate, None, &[&[1, 2, 3]], false, "a candidate"),
            (
                Learner,
                Some(1),
                &[&[2, 3]],
                false,
                "stepped down, still named leader",
            ),
        ];
        for (state, leader, configs, want, what) in cases {
            let m = metrics(*state, *leader, configs);
            assert_eq!(may_change_membership(&m, 1), *want, "{what}");
        }
    }
}
