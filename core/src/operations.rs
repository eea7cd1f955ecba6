//! Lifecycle operations and the workers that run them: the replicated queue of work on resources
//! (create, update, delete a deployment; bind; start or abort a backup), who runs what, and how
//! far each operation got.
//!
//! An `Operation` asks for a verb on a target resource; a `Worker` registers the (kind, verb)
//! pairs it handles, how many operations it runs at once, and a heartbeat TTL. Only `apply`
//! changes them: the op commands are applied in `operations/apply.rs`, which binds each step of an
//! operation to the target's lock and to the target resource in one atomic step, through the
//! table-only transitions of `OperationTable` in `ops`. As everywhere in `state`, there is no
//! clock (time is the leader-stamped `State::time_ms`), no I/O, no randomness, and every decision
//! iterates ordered collections.
//!
//! Dispatch is exactly-once in effect because of these rules:
//! - **The leader proposes, apply decides.** The leader's scheduler proposes an `OpAssign` for
//!   each pair `State::ops_dispatchable` offers; apply re-checks everything (the operation is
//!   queued and first on its target, the worker is alive, handles the verb and has room, the lock
//!   is free), so a stale or duplicated proposal is refused, never applied twice.
//! - **One epoch per assignment, never reused.** An assignment takes a fencing token from the
//!   lock table's store-wide counter: the token of its grant on the target's lock, or a bare token
//!   when it locks nothing. Tokens only grow, so epochs are unique and increase. A report must
//!   carry the (attempt, epoch, worker) of the current assignment; any other is `StaleAssignment`,
//!   so a worker presumed dead cannot overwrite what its successor did.
//! - **The lock lives exactly as long as the assignment.** It is taken in the step that assigns
//!   and released in the step that ends the operation or takes the assignment back, and no client
//!   command may release, refresh or re-acquire it (`LockHolder::operation`). A WRITE grant's token
//!   is the epoch, so the worker can fence its own resource writes with `Operation::fence`.
//! - **One operation at a time per target, in submit order.** An operation is assigned only when
//!   every earlier one on its target has ended, so a requeued create cannot run after the delete
//!   submitted behind it.
//! - **Expiry only in a sweep, after a grace.** A worker past its TTL gets no new work but keeps
//!   its assignments (and its reports count) until an `OpSweep` entry takes them back; a deadline
//!   likewise acts only in a sweep. Like `LockSweep`, a sweep does nothing until `grace_ms` after
//!   the current term's first stamped entry, so a leader change never kills a worker early.
//!
//! Queries (`State::operation`, `State::operations`, `State::workers`, `State::ops_dispatchable`,
//! `State::ops_due`) read the same table. Reservations (resources that expire into a
//! decommission) will be a separate table that submits operations through the same commands.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::locks::{Fence, LockMode};
use crate::objects::resource::ObjectKey;

pub(crate) mod apply;
#[cfg(test)]
mod assign_tests;
mod changes;
pub mod command;
#[cfg(test)]
mod proptests;
mod queries;
#[cfg(test)]
mod reservation_tests;
mod rules;
#[cfg(test)]
mod submit_tests;
#[cfg(test)]
mod sweep_tests;
mod table;
#[cfg(test)]
mod tests;

pub use rules::check_verb;
pub(crate) use rules::{
    at_limit, check_handles, check_idempotency_key, check_params, check_policy, check_report,
    check_sweep, check_target, check_worker, check_worker_terms, under,
};
pub(crate) use table::{check_operation, OperationTable};

/// Longest verb (`create`, `backup`, `unbind`).
pub const OP_VERB_CHARS_MAX: usize = 63;
/// Longest idempotency key.
pub const OP_IDEMPOTENCY_KEY_CHARS_MAX: usize = 253;
/// Longest worker id; leaves room for the `op-<index>@` prefix of its lock holder ids within
/// `LOCK_HOLDER_CHARS_MAX`.
pub const WORKER_ID_CHARS_MAX: usize = 128;
/// Longest heartbeat TTL a worker may ask for: 1 h. A dead worker keeps its operations (and their
/// locks) for up to this long.
pub const WORKER_TTL_MS_MAX: u64 = 3_600_000;
/// Most workers and most operations `State::ops_due` returns, and most of each one `OpSweep`
/// may carry, so one sweep entry stays small and quick to apply.
pub const OP_SWEEP_ITEMS_MAX: usize = 1000;

/// An operation's id: `op-<log index of its submit>`. Deterministic (never random), unique
/// (one submit per entry) and ordered like submits, so "oldest first" is id order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OperationId(pub u64);

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op-{}", self.0)
    }
}

impl FromStr for OperationId {
    type Err = String;

    /// `op-` and a decimal index >= 1.
    fn from_str(text: &str) -> Result<OperationId, String> {
        let digits = text.strip_prefix("op-").unwrap_or("");
        let index = match digits.bytes().all(|b| b.is_ascii_digit()) {
            true => digits.parse::<u64>().ok().filter(|&i| i > 0),
            false => None,
        };
        index
            .map(OperationId)
            .ok_or_else(|| format!("{text:?} is not an operation id (op-<number>, e.g. op-17)"))
    }
}

impl Serialize for OperationId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OperationId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OperationId, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Where an operation is. `Queued -> Dispatched -> InProgress -> Succeeded | Failed`; an abort
/// moves `Queued` to `Aborted` and an assigned operation to `Aborting` until its worker confirms.
/// A worker that dies takes its assignments back to `Queued` (or to `Failed` after the last
/// attempt; `Aborting` ones to `Aborted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OpState {
    Queued,
    /// Assigned to a worker that has not said it started.
    Dispatched,
    InProgress,
    /// Abort asked (or the deadline passed) while assigned; the worker still holds it.
    Aborting,
    Succeeded,
    Failed,
    Aborted,
}

impl OpState {
    /// Every state, in lifecycle order.
    pub const ALL: [OpState; 7] = [
        OpState::Queued,
        OpState::Dispatched,
        OpState::InProgress,
        OpState::Aborting,
        OpState::Succeeded,
        OpState::Failed,
        OpState::Aborted,
    ];

    /// Ended: nothing changes it any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            OpState::Succeeded | OpState::Failed | OpState::Aborted
        )
    }

    /// A worker holds it (and its lock, if it has one).
    pub fn is_assigned(self) -> bool {
        matches!(
            self,
            OpState::Dispatched | OpState::InProgress | OpState::Aborting
        )
    }

    /// What the target resource shows in `status.state` and its `state` label, in the words of
    /// Service Fabrik's resources. Dispatched shows as `in_progress`: for the resource's owner the
    /// work has been taken; the difference is the scheduler's, visible on the operation.
    pub fn resource_state(self) -> &'static str {
        match self {
            OpState::Queued => "in_queue",
            OpState::Dispatched | OpState::InProgress => "in_progress",
            OpState::Aborting => "aborting",
            OpState::Succeeded => "succeeded",
            OpState::Failed => "failed",
            OpState::Aborted => "aborted",
        }
    }
}

impl fmt::Display for OpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One (kind, verb) a worker handles, written `Director:create`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Handle {
    pub kind: String,
    pub verb: String,
}

impl Handle {
    pub fn new(kind: &str, verb: &str) -> Handle {
        Handle {
            kind: kind.to_string(),
            verb: verb.to_string(),
        }
    }
}

impl fmt::Display for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.verb)
    }
}

impl FromStr for Handle {
    type Err = String;

    /// `Kind:verb` (the parts are checked when the worker registers).
    fn from_str(text: &str) -> Result<Handle, String> {
        match text.split_once(':') {
            Some((kind, verb)) if !kind.is_empty() && !verb.is_empty() => {
                Ok(Handle::new(kind, verb))
            }
            _ => Err(format!(
                "{text:?} is not a handle (Kind:verb, e.g. Director:create)"
            )),
        }
    }
}

/// The lock an operation takes while assigned: WRITE for verbs that change the target, READ for
/// those that only read it (a backup), as the server's configuration says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpLock {
    /// Usually the target's (`OpLock::on_target`); a submit may name another resource's (a
    /// backup locks its deployment).
    pub name: String,
    pub mode: LockMode,
}

impl OpLock {
    /// The lock named after the target (`Director/default/x`), which clients may also take to
    /// keep operations off a resource.
    pub fn on_target(target: &ObjectKey, mode: LockMode) -> OpLock {
        OpLock {
            name: target.to_string(),
            mode,
        }
    }
}

/// How one operation runs, decided by the server from its configuration for the (kind, verb)
/// and carried in the submit, so apply stays pure and old entries replay the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpPolicy {
    /// `None`: the operation takes no lock (its epoch is still a fresh token).
    pub lock: Option<OpLock>,
    /// Assignments a dead worker may lose before the operation fails (>= 1).
    pub max_attempts: u32,
    /// Time from submit after which a sweep fails it (queued) or aborts it (assigned).
    pub deadline_ms: Option<u64>,
    /// A successful run deletes the target (Service Fabrik's `delete`).
    pub deletes_target: bool,
}

/// What an ended operation produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OpResult {
    /// The worker's JSON answer of a success; the target's `status.response`.
    Response(serde_json::Value),
    /// Why it failed or was aborted; the target's `status.error`.
    Error(String),
}

/// One state change of an operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    pub state: OpState,
    /// Leader time of the entry that made it.
    pub time_ms: u64,
    pub attempt: u32,
    /// The assigned worker, while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// One lifecycle operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    pub id: OperationId,
    /// A repeated submit with this key returns this operation instead of a new one (while it
    /// is retained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    pub target: ObjectKey,
    /// The uid of the target when submitted: the operation only ever writes that object, never
    /// a later one created under the same key.
    pub target_uid: String,
    pub verb: String,
    /// A JSON object or null, for the worker.
    pub params: serde_json::Value,
    pub policy: OpPolicy,
    pub state: OpState,
    /// 1-based: the attempt the current (or next) assignment runs.
    pub attempt: u32,
    /// The current assignment's worker; after the end, the last one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The current (or last) assignment's epoch; 0 before the first.
    pub epoch: u64,
    pub submitted_ms: u64,
    /// `submitted_ms + policy.deadline_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at_ms: Option<u64>,
    /// Every state it was in, oldest first (at most a few per attempt).
    pub transitions: Vec<Transition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<OpResult>,
}

impl Operation {
    /// The holder id of the current assignment's grant: `op-17@worker-1`.
    pub fn lock_holder(&self) -> Option<String> {
        let worker = self.worker.as_ref().filter(|_| self.state.is_assigned())?;
        Some(format!("{}@{worker}", self.id))
    }

    /// The fence a worker puts on its resource writes while its assignment holds the WRITE
    /// lock: the store refuses them once the assignment is over.
    pub fn fence(&self) -> Option<Fence> {
        let lock = self.policy.lock.as_ref()?;
        (self.state.is_assigned() && lock.mode == LockMode::Write).then(|| Fence {
            lock: lock.name.clone(),
            token: self.epoch,
        })
    }

    /// Time of the last transition (its end, once final).
    pub fn last_change_ms(&self) -> u64 {
        self.transitions
            .last()
            .map_or(self.submitted_ms, |t| t.time_ms)
    }
}

/// A registered worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Worker {
    /// Chosen by the worker (`bosh-manager@10.0.2.2`); its lock grants are held as
    /// `op-<index>@<id>`.
    pub id: String,
    pub handles: BTreeSet<Handle>,
    /// Most operations it runs at once.
    pub capacity: u32,
    pub ttl_ms: u64,
    pub registered_ms: u64,
    pub last_heartbeat_ms: u64,
    /// Its current assignments (Dispatched, InProgress or Aborting operations).
    pub assigned: BTreeSet<OperationId>,
}

impl Worker {
    /// Last heartbeat + TTL: from then on it gets no new work, and a sweep may take its work back.
    pub fn expires_at_ms(&self) -> u64 {
        self.last_heartbeat_ms.saturating_add(self.ttl_ms)
    }

    /// Alive at leader time `now_ms`.
    pub fn is_alive(&self, now_ms: u64) -> bool {
        self.expires_at_ms() > now_ms
    }

    pub fn handles(&self, kind: &str, verb: &str) -> bool {
        self.handles
            .iter()
            .any(|h| h.kind == kind && h.verb == verb)
    }

    /// How many more operations it may take.
    pub fn room(&self) -> usize {
        usize_of(self.capacity).saturating_sub(self.assigned.len())
    }
}

/// The leader's configured limits, carried in each op command so every replica judges with the
/// same ones. Each has a `TooLarge` (or `Invalid`) rejection naming its key in the server's
/// `[operations]` configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpLimits {
    /// `operations.active_max`: operations not yet ended, in the store.
    pub active_max: u32,
    /// `operations.per_target_max`: operations not yet ended, on one target.
    pub per_target_max: u32,
    /// `operations.finished_max`: ended operations kept for queries and idempotent submits;
    /// past it the oldest ended are forgotten.
    pub finished_max: u32,
    /// `operations.params_bytes_max`: `params` as compact JSON.
    pub params_bytes_max: u32,
    /// `operations.result_bytes_max`: a report's response (compact JSON) or error.
    pub result_bytes_max: u32,
    /// `operations.attempts_max`: the largest `max_attempts` a submit may ask for.
    pub attempts_max: u32,
    /// `operations.deadline_ms_max`: the longest deadline a submit may ask for.
    pub deadline_ms_max: u64,
    /// `operations.workers_max`: registered workers.
    pub workers_max: u32,
    /// `operations.handles_max`: handles of one worker.
    pub handles_max: u32,
    /// `operations.capacity_max`: the largest capacity a worker may ask for.
    pub capacity_max: u32,
}

/// What a sweep or a deregistration did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpTally {
    /// Dead (or deregistered) workers removed.
    pub workers_removed: u32,
    /// Assignments taken back to `Queued` for another attempt.
    pub requeued: u32,
    /// Operations failed: out of attempts, or queued past their deadline.
    pub failed: u32,
    /// `Aborting` operations whose worker died: they end as `Aborted`.
    pub aborted: u32,
    /// Assigned operations past their deadline, now `Aborting`.
    pub aborting: u32,
}

/// A change of one operation, for `op watch` and for the worker streams (an assignment reaches
/// its worker as the `Dispatched` change, an abort as the `Aborting` one).
#[derive(Clone, Debug, PartialEq)]
pub struct OpEvent {
    /// The operation after the change; shared so fanning out does not copy it.
    pub operation: Arc<Operation>,
}

/// Which operations `State::operations` lists (every given filter must match).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpFilter {
    pub state: Option<OpState>,
    pub target: Option<ObjectKey>,
    /// Operations assigned to this worker now, or that ended under it.
    pub worker: Option<String>,
}

impl OpFilter {
    pub fn matches(&self, op: &Operation) -> bool {
        self.state.is_none_or(|s| op.state == s)
            && self.target.as_ref().is_none_or(|t| op.target == *t)
            && self
                .worker
                .as_ref()
                .is_none_or(|w| op.worker.as_ref() == Some(w))
    }
}

/// One assignment the leader may propose (`Command::OpAssign`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub id: OperationId,
    pub worker: String,
}

/// What an `OpSweep` at a given time would have to look at (`State::ops_due`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpsDue {
    /// Workers past their TTL, earliest expiry first.
    pub workers: Vec<String>,
    /// Operations past their deadline that a sweep can still act on (queued or running, not
    /// aborting), earliest deadline first.
    pub operations: Vec<OperationId>,
}

impl OpsDue {
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty() && self.operations.is_empty()
    }
}

/// A `u32` limit as a length bound.
pub(crate) fn usize_of(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
