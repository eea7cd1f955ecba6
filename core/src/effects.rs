//! What every capability's apply is given and gives back besides its reply: where the entry sits
//! in the log and the time its leader stamped (`ApplyContext`), and what it did for watchers
//! (`Effects`). Below every apply, so the guard in `apply.rs` and the capabilities' applies all
//! build on it without importing each other.

use crate::command::Event;
use crate::command::Proposal;
use crate::locks::LockEvent;
use crate::operations::OpEvent;

/// Where the entry being applied sits in the log, and the time its leader stamped on it.
#[derive(Clone, Copy, Debug)]
pub struct ApplyContext {
    /// Raft log index of the entry; feeds uids.
    pub log_index: u64,
    /// Raft term of the entry; feeds uids and the lock grace after a leader change.
    pub term: u64,
    /// Cluster time in ms stamped on the entry (`Proposal::time_ms`).
    pub time_ms: u64,
    /// `time_ms` was measured by the leader of the entry's own term. Apply applies nothing else
    /// (`Rejection::NotStamped`): no time, no grant, no expiry (README "Time", promise 3).
    pub stamped: bool,
    /// The leader's shown wall-clock time (`Proposal::wall_ms`), for display only.
    pub wall_ms: Option<u64>,
}

impl ApplyContext {
    /// The context of a normal entry at `log_index` of `term` carrying `proposal`.
    pub fn of_proposal(log_index: u64, term: u64, proposal: &Proposal) -> ApplyContext {
        // Entries from before issue 24 carry no term: their wall-clock stamp counts, as it
        // always did.
        let stamped = proposal.term.is_none_or(|t| t == term)
            // DELIBERATE BUG (bugs.rs, test-only builds): any term's stamp counts.
            || crate::bugs::active(crate::bugs::Bug::StaleTermTime);
        ApplyContext {
            log_index,
            term,
            time_ms: proposal.time_ms,
            stamped,
            wall_ms: proposal.wall_ms,
        }
    }

    /// The context of an entry that carries no time (blank, membership) at `time_ms`, the
    /// state's own time.
    pub fn unstamped(log_index: u64, term: u64, time_ms: u64) -> ApplyContext {
        ApplyContext {
            log_index,
            term,
            time_ms,
            stamped: false,
            wall_ms: None,
        }
    }
}

/// What one or more applied entries did besides their `Response`: object changes for resource
/// watchers, lock changes for lock watchers and waiting acquires, and operation changes for
/// operation watchers and worker streams. Cleared by the caller.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    /// One per object change, in revision order.
    pub events: Vec<Event>,
    /// One per grant, release, expiry, cancelled or expired wait, in the order they happened.
    pub lock_events: Vec<LockEvent>,
    /// One per operation change, in the order they happened.
    pub op_events: Vec<OpEvent>,
    /// One per waiting pool acquire granted or removed.
    pub pool_events: Vec<crate::pools::PoolEvent>,
    /// One per key of etcd's keyspace changed, in order (several at one revision in a txn).
    pub kv_events: Vec<crate::kv::KvEvent>,
}

impl Effects {
    /// True when nothing happened.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.lock_events.is_empty()
            && self.op_events.is_empty()
            && self.pool_events.is_empty()
            && self.kv_events.is_empty()
    }
}
