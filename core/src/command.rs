//! The replicated vocabulary: `Proposal` (one log entry's payload), `Command` and `TxnOp` (what a
//! client asks), `Response` (what `apply` answers), `Rejection` (the domain "no", which is data,
//! not an error), and `Event` (what watchers see).
//!
//! Everything here is serialized into the Raft log or sent back to clients, so renaming a variant
//! or field is a wire change; fields added later carry `#[serde(default)]` so older log entries
//! still parse. Servers build `Command`s, the leader wraps them in a `Proposal` with its own clock,
//! and only `apply.rs` (and `locks`, for the lock commands) interprets them.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::alarms::{Alarm, AlarmAction};
use crate::auth::{AuthAction, User};
use crate::deployments::{DeploymentAction, StatusLimits};
use crate::locks::{Fence, LockHolder, LockLimits, LockMode};
use crate::objects::resource::{ObjectKey, Resource};
use crate::operations::{
    Handle, OpLimits, OpPolicy, OpState, OpTally, Operation, OperationId, Worker,
};
use crate::pools::PoolAction;

/// The payload of one replicated log entry. The leader stamps `time_ms` when it proposes, so every
/// replica applies the same time (see `State::time_ms`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proposal {
    /// Leader wall-clock time in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// What to do.
    pub command: Command,
}

impl fmt::Display for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} @{}", self.command, self.time_ms)
    }
}

/// A state change a client asked for. Applied by `apply`, which re-checks everything.
///
/// Every resource write may carry a `fence`: it is applied only if that lock token is, at that
/// point of the log, a live WRITE holder of that lock (see `locks`), else it is refused with
/// `Rejection::FenceRejected` and changes nothing.
// The large variants are the common ones; boxing would change the shape other layers build.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Command {
    /// Store a new object; rejected if its key exists.
    Create {
        object: Resource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// Replace apiVersion, spec, labels and annotations; status and server-set metadata are kept.
    /// `generation` grows only if spec changed; an update that changes nothing is a no-op.
    Update {
        object: Resource,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// Replace status only; generation unchanged.
    UpdateStatus {
        object: Resource,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// Remove an object.
    Delete {
        key: ObjectKey,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// All-or-nothing sequence of object ops, each seeing the effects of the earlier ones. One
    /// fence covers the whole txn.
    Txn {
        ops: Vec<TxnOp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// Record that a node id left the cluster, so it is never admitted again.
    RetireNode { node_id: u64 },
    /// Take lock `name` in `mode` for `holder`: granted at once, or (when `wait_ms` > 0) queued
    /// until granted, cancelled, or past `wait_ms`. `limits` are the leader's configured limits,
    /// carried in the entry so every replica judges with the same ones.
    LockAcquire {
        name: String,
        holder: String,
        mode: LockMode,
        /// `None`: held until released.
        ttl_ms: Option<u64>,
        /// `lockedResourceDetails` or any JSON object; null for none.
        details: serde_json::Value,
        wait_ms: u64,
        limits: LockLimits,
    },
    /// Extend a grant: new expiry = now + ttl. `ttl_ms: None` keeps the grant's ttl.
    LockRefresh {
        name: String,
        holder: String,
        token: u64,
        ttl_ms: Option<u64>,
    },
    /// Give a grant back.
    LockRelease {
        name: String,
        holder: String,
        token: u64,
    },
    /// The waiter of `wait_id` gave up (its deadline passed or its caller went away): remove it,
    /// or, if it was granted meanwhile, release that grant. Unknown waits are a no-op.
    LockCancelWait {
        name: String,
        holder: String,
        wait_id: u64,
    },
    /// Proposed by the leader's expiry task for the names `State::locks_due` gave it: expire
    /// holders and waiters past their time, apply lock-delay, grant the queue. Apply re-checks
    /// everything, including the grace after a leader change.
    LockSweep {
        names: Vec<String>,
        grace_ms: u64,
        lock_delay_ms: u64,
    },
    /// Register `worker`, or re-register it: handles, capacity and ttl are replaced, its
    /// assignments kept. Counts as a heartbeat.
    WorkerRegister {
        worker: String,
        handles: Vec<Handle>,
        capacity: u32,
        ttl_ms: u64,
        limits: OpLimits,
    },
    /// `worker` is alive: it expires `ttl_ms` from now.
    WorkerHeartbeat { worker: String },
    /// `worker` leaves: its assignments are taken back as if it had died, and it is removed.
    WorkerDeregister { worker: String, limits: OpLimits },
    /// Queue `verb` on `target` (which must exist, unless `create` carries it: then it is
    /// created in the same step and must not exist). `policy` is the server's decision for this
    /// (kind, verb). With an `idempotency_key` already used, answers the first operation and
    /// changes nothing.
    OpSubmit {
        target: ObjectKey,
        verb: String,
        /// A JSON object or null, for the worker.
        params: serde_json::Value,
        idempotency_key: Option<String>,
        create: Option<Resource>,
        policy: OpPolicy,
        limits: OpLimits,
    },
    /// Proposed by the leader's scheduler for a pair `State::ops_dispatchable` gave it: assign
    /// queued operation `id` to `worker` and take its lock. Apply re-checks everything.
    OpAssign {
        id: OperationId,
        worker: String,
        lock_limits: LockLimits,
    },
    /// A worker's progress or result, for the assignment (attempt, epoch) it was given.
    OpReport {
        id: OperationId,
        worker: String,
        attempt: u32,
        epoch: u64,
        report: WorkerReport,
        limits: OpLimits,
    },
    /// Abort `id`: a queued operation ends `Aborted`, an assigned one becomes `Aborting` until
    /// its worker confirms.
    OpAbort { id: OperationId, limits: OpLimits },
    /// Proposed by the leader's expiry task for what `State::ops_due` gave it: take back the
    /// work of dead workers and remove them, and act on passed deadlines. Apply re-checks
    /// everything, including the grace after a leader change.
    OpSweep {
        workers: Vec<String>,
        operations: Vec<OperationId>,
        grace_ms: u64,
        limits: OpLimits,
    },
    /// Proposed by the leader for a key `State::reservations_due` gave it: submit the
    /// decommission (`verb` under `policy`, idempotency key `decommission/<uid>`) of the
    /// reservation on `target` and mark the reservation with it, in one step. Apply re-checks
    /// that it is due at this entry's time and not yet decommissioned.
    Decommission {
        target: ObjectKey,
        verb: String,
        policy: OpPolicy,
        limits: OpLimits,
    },
    /// A deployment's life cycle step or status report (`deployments`), applied to its status
    /// table and its mirror object (`key`, of kind `DeploymentIntentGroup`) together.
    Deployment {
        key: ObjectKey,
        action: DeploymentAction,
        limits: StatusLimits,
    },
    /// A lease, heartbeat, release, reset or sync of pool resources (`pools`). `grace_ms` is the
    /// grace after a leader change during which a reset resets nothing (as for lock sweeps).
    Pool {
        action: PoolAction,
        #[serde(default)]
        grace_ms: u64,
    },
    /// A change to users, roles, or whether authentication is on (`auth`).
    Auth { action: AuthAction },
    /// A node raises an alarm, or an operator disarms alarms (`alarm`).
    Alarm { action: AlarmAction },
    /// A client's command, authorized against users and roles at `auth_revision`: applied only
    /// if they have not changed since, else refused with `Rejection::AuthChanged`.
    Guarded {
        auth_revision: u64,
        command: Box<Command>,
    },
}

/// What a worker says about its assignment (`Command::OpReport`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WorkerReport {
    /// It began: Dispatched -> InProgress.
    Started,
    /// It is done; `response` (any JSON) becomes the target's `status.response`.
    Succeeded { response: serde_json::Value },
    /// It failed for good; `error` becomes the target's `status.error`.
    Failed { error: String },
    /// It stopped as asked (the operation is `Aborting`).
    Aborted,
}

impl WorkerReport {
    /// The state this report ends in (Started: InProgress).
    pub fn state(&self) -> OpState {
        match self {
            WorkerReport::Started => OpState::InProgress,
            WorkerReport::Succeeded { .. } => OpState::Succeeded,
            WorkerReport::Failed { .. } => OpState::Failed,
            WorkerReport::Aborted => OpState::Aborted,
        }
    }
}

/// One step of a `Command::Txn`; same meaning as the `Command` of the same name.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum TxnOp {
    Create {
        object: Resource,
    },
    Update {
        object: Resource,
        expected_revision: Option<u64>,
    },
    UpdateStatus {
        object: Resource,
        expected_revision: Option<u64>,
    },
    Delete {
        key: ObjectKey,
        expected_revision: Option<u64>,
    },
}

impl TxnOp {
    /// The key this op touches.
    pub fn key(&self) -> ObjectKey {
        match self {
            TxnOp::Create { object }
            | TxnOp::Update { object, .. }
            | TxnOp::UpdateStatus { object, .. } => object.key(),
            TxnOp::Delete { key, .. } => key.clone(),
        }
    }

    /// The same op as a single command, under `fence`.
    pub fn into_command(self, fence: Option<Fence>) -> Command {
        match self {
            TxnOp::Create { object } => Command::Create { object, fence },
            TxnOp::Update {
                object,
                expected_revision,
            } => Command::Update {
                object,
                expected_revision,
                fence,
            },
            TxnOp::UpdateStatus {
                object,
                expected_revision,
            } => Command::UpdateStatus {
                object,
                expected_revision,
                fence,
            },
            TxnOp::Delete {
                key,
                expected_revision,
            } => Command::Delete {
                key,
                expected_revision,
                fence,
            },
        }
    }

    fn verb(&self) -> &'static str {
        match self {
            TxnOp::Create { .. } => "create",
            TxnOp::Update { .. } => "update",
            TxnOp::UpdateStatus { .. } => "update-status",
            TxnOp::Delete { .. } => "delete",
        }
    }
}

impl fmt::Display for TxnOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb(), self.key())
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Create { object, .. } => write!(f, "create {}", object.key()),
            Command::Update { object, .. } => write!(f, "update {}", object.key()),
            Command::UpdateStatus { object, .. } => write!(f, "update-status {}", object.key()),
            Command::Delete { key, .. } => write!(f, "delete {key}"),
            Command::Txn { ops, .. } => {
                write!(f, "txn [")?;
                for (i, op) in ops.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{op}")?;
                }
                write!(f, "]")
            }
            Command::RetireNode { node_id } => write!(f, "retire-node {node_id}"),
            Command::Auth { action } => write!(f, "{action}"),
            Command::Alarm { action } => write!(f, "{action}"),
            Command::Guarded {
                auth_revision,
                command,
            } => write!(f, "{command} (auth revision {auth_revision})"),
            Command::LockAcquire {
                name, holder, mode, ..
            } => write!(f, "lock-acquire {name} {mode} by {holder}"),
            Command::LockRefresh {
                name,
                holder,
                token,
                ..
            } => write!(f, "lock-refresh {name} by {holder} token {token}"),
            Command::LockRelease {
                name,
                holder,
                token,
            } => write!(f, "lock-release {name} by {holder} token {token}"),
            Command::LockCancelWait {
                name,
                holder,
                wait_id,
            } => write!(f, "lock-cancel-wait {name} by {holder} wait {wait_id}"),
            Command::LockSweep { names, .. } => write!(f, "lock-sweep {} locks", names.len()),
            Command::WorkerRegister {
                worker, handles, ..
            } => write!(f, "worker-register {worker} ({} handles)", handles.len()),
            Command::WorkerHeartbeat { worker } => write!(f, "worker-heartbeat {worker}"),
            Command::WorkerDeregister { worker, .. } => write!(f, "worker-deregister {worker}"),
            Command::OpSubmit { target, verb, .. } => write!(f, "op-submit {verb} {target}"),
            Command::OpAssign { id, worker, .. } => write!(f, "op-assign {id} to {worker}"),
            Command::OpReport {
                id,
                worker,
                epoch,
                report,
                ..
            } => write!(
                f,
                "op-report {id} {} by {worker} epoch {epoch}",
                report.state()
            ),
            Command::OpAbort { id, .. } => write!(f, "op-abort {id}"),
            Command::OpSweep {
                workers,
                operations,
                ..
            } => write!(
                f,
                "op-sweep {} workers {} operations",
                workers.len(),
                operations.len()
            ),
            Command::Decommission { target, verb, .. } => {
                write!(f, "decommission {target} by {verb}")
            }
            Command::Deployment { key, action, .. } => {
                write!(f, "deployment-{} {key}", action.verb())
            }
            Command::Pool { action, .. } => write!(f, "pool-{}", action.verb()),
        }?;
        match self.fence() {
            Some(fence) => write!(f, " fenced by {fence}"),
            None => Ok(()),
        }
    }
}

impl Command {
    /// Whether this command may make the state bigger: it adds an object, a lock, a worker, an
    /// operation, a deployment, or replaces an object with one that may be larger. While a
    /// NOSPACE alarm is raised these are refused (`Rejection::NoSpace`); deletes, releases,
    /// heartbeats, reports, sweeps and administration pass, so space can be won back and work
    /// already under way can finish. Exhaustive on purpose: a new command must choose.
    pub fn may_grow(&self) -> bool {
        match self {
            Command::Create { .. } | Command::Update { .. } | Command::UpdateStatus { .. } => true,
            Command::Txn { ops, .. } => ops.iter().any(|op| !matches!(op, TxnOp::Delete { .. })),
            Command::LockAcquire { .. }
            | Command::WorkerRegister { .. }
            | Command::OpSubmit { .. } => true,
            Command::Deployment { action, .. } => matches!(
                action,
                DeploymentAction::Create { .. } | DeploymentAction::AddResources { .. }
            ),
            Command::Pool { action, .. } => matches!(
                action,
                PoolAction::Acquire { .. }
                    | PoolAction::AcquireByState { .. }
                    | PoolAction::Sync { .. }
                    | PoolAction::SyncVirtual { .. }
            ),
            Command::Guarded { command, .. } => command.may_grow(),
            Command::Delete { .. }
            | Command::RetireNode { .. }
            | Command::LockRefresh { .. }
            | Command::LockRelease { .. }
            | Command::LockCancelWait { .. }
            | Command::LockSweep { .. }
            | Command::WorkerHeartbeat { .. }
            | Command::WorkerDeregister { .. }
            | Command::OpAssign { .. }
            | Command::OpReport { .. }
            | Command::OpAbort { .. }
            | Command::OpSweep { .. }
            | Command::Decommission { .. }
            | Command::Auth { .. }
            | Command::Alarm { .. } => false,
        }
    }

    /// The fence of a resource write, if it carries one.
    pub fn fence(&self) -> Option<&Fence> {
        match self {
            Command::Create { fence, .. }
            | Command::Update { fence, .. }
            | Command::UpdateStatus { fence, .. }
            | Command::Delete { fence, .. }
            | Command::Txn { fence, .. } => fence.as_ref(),
            _ => None,
        }
    }
}

/// What `apply` answers for one command. `revision` is always the store revision after the
/// command (unchanged for a no-op update).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Response {
    /// Create/update/update-status: the object as stored. Delete: the object as deleted, its
    /// resourceVersion set to the deletion revision.
    Object { object: Resource, revision: u64 },
    /// One object per op, as `Object` would have returned it.
    Txn {
        objects: Vec<Resource>,
        revision: u64,
    },
    /// RetireNode, blank or membership entries, and lock commands that found nothing to do.
    Done { revision: u64 },
    /// LockAcquire granted at once (or re-acquired: refreshed, upgraded, downgraded).
    LockGranted { holder: LockHolder },
    /// LockAcquire queued; `position` is 1-based (1: next in line). The grant, if it comes,
    /// is a `LockEvent` of type `Granted` carrying this `wait_id`.
    LockQueued { wait_id: u64, position: u32 },
    /// LockRelease: this token is no longer valid.
    LockReleased { token: u64 },
    /// LockRefresh: the grant with its new expiry.
    LockRefreshed { holder: LockHolder },
    /// LockCancelWait: the waiter is gone; `released_token` is the grant it had already been
    /// given, now released.
    LockWaitCancelled { released_token: Option<u64> },
    /// LockSweep: holders expired, waiters timed out, waiters granted.
    LockSwept {
        expired: u32,
        waiters_expired: u32,
        granted: u32,
    },
    /// OpSubmit: the operation as stored; `created` is false when the idempotency key named an
    /// existing one (then nothing changed).
    OpSubmitted { operation: Operation, created: bool },
    /// OpAssign, OpReport, OpAbort: the operation after the command.
    Operation { operation: Operation },
    /// WorkerRegister, WorkerHeartbeat: the worker after the command.
    Worker { worker: Worker },
    /// WorkerDeregister: what became of its assignments.
    WorkerDeregistered { tally: OpTally },
    /// OpSweep: workers removed, assignments taken back, operations ended or aborting.
    OpSwept { tally: OpTally },
    /// Auth: whether authentication is on, the auth revision, and the user changed (none for
    /// a deletion or an on/off switch).
    Auth {
        enabled: bool,
        revision: u64,
        user: Option<User>,
    },
    /// Alarm: every raised alarm after it.
    Alarms { alarms: Vec<Alarm> },
    /// The command changed nothing (except, possibly, the state's time).
    Rejected(Rejection),
}

/// Why a command was refused. These are answers, not failures: they are replicated like any
/// other response, and each message names the field and the rule.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, thiserror::Error)]
pub enum Rejection {
    #[error("{key} already exists")]
    AlreadyExists { key: ObjectKey },
    #[error("{key} not found")]
    NotFound { key: ObjectKey },
    #[error("conflict on {key}: expected resourceVersion {expected}, found {actual}")]
    Conflict {
        key: ObjectKey,
        expected: u64,
        actual: u64,
    },
    #[error("{field}: {rule}")]
    Invalid { field: String, rule: String },
    #[error("{field}: {rule}")]
    TooLarge { field: String, rule: String },
    #[error("txn op {index}: {cause}")]
    TxnOpFailed { index: usize, cause: Box<Rejection> },
    #[error("node id {node_id} was removed from the cluster and cannot be reused")]
    NodeRetired { node_id: u64 },
    /// `wait_ms` was 0 and the lock cannot be granted now.
    #[error(
        "lock {name} is busy: held in {mode_held} mode by {holders} holder(s) with {waiters} \
         waiting before you; pass wait_ms > 0 to queue"
    )]
    LockBusy {
        name: String,
        /// The mode of the current holders (of the first waiter when nobody holds it).
        mode_held: LockMode,
        holders: u32,
        waiters: u32,
    },
    /// `wait_ms` was 0 and the lock is in lock-delay after a WRITE holder expired.
    #[error(
        "lock {name} is in lock-delay until {until_ms} ms (a WRITE holder expired without \
         releasing it); pass wait_ms > 0 to queue"
    )]
    LockDelayed { name: String, until_ms: u64 },
    /// Refresh or release named a holder and token that hold no grant: a stale or wrong token.
    #[error(
        "lock {name}: holder {holder} holds no grant with token {token} (released, expired, \
         superseded by an upgrade or downgrade, or never granted)"
    )]
    LockNotHeld {
        name: String,
        holder: String,
        token: u64,
    },
    /// A fenced write whose token is not a live WRITE holder of its lock.
    #[error("fence {lock}:{token} refused: {reason}")]
    FenceRejected {
        lock: String,
        token: u64,
        reason: String,
    },
    /// A client command named a grant that an operation's assignment holds.
    #[error(
        "lock {name}: the grant of {holder} belongs to operation {operation} and ends with it; \
         abort the operation instead"
    )]
    LockOwnedByOperation {
        name: String,
        holder: String,
        operation: OperationId,
    },
    /// A `Decommission` for a reservation that is not due, or whose decommission was submitted.
    #[error("reservation on {key}: {reason}")]
    ReservationNotDue { key: ObjectKey, reason: String },
    /// No unowned pool resource of the type is in the state.
    #[error("no free resource of type {rtype} in state {state}")]
    PoolEmpty { rtype: String, state: String },
    /// A pool update or release by someone who does not hold the lease.
    #[error("pool resource {name} is not leased by {owner} (owner: {holder:?})")]
    PoolNotOwner {
        name: String,
        owner: String,
        holder: String,
    },
    /// A pool resource not in the state the request needs.
    #[error("pool resource {name}: {reason}")]
    PoolState { name: String, reason: String },
    /// A deployment action its life cycle does not allow now.
    #[error("deployment {key}: {reason}")]
    DeploymentState { key: ObjectKey, reason: String },
    /// A report or update naming an app, cluster or resource the deployment does not have.
    #[error("deployment {key} has no {what}")]
    DeploymentResourceNotFound { key: ObjectKey, what: String },
    #[error("operation {id} not found (never submitted, or ended and no longer retained)")]
    OperationNotFound { id: OperationId },
    #[error(
        "worker {worker} is not registered (never registered, deregistered, or removed after \
         its heartbeat expired)"
    )]
    WorkerNotFound { worker: String },
    /// The operation is not in a state this command may move it from.
    #[error("operation {id} is {state}; {action} needs it {allowed}")]
    OperationState {
        id: OperationId,
        state: OpState,
        action: String,
        allowed: String,
    },
    /// An earlier operation on the same target has not ended.
    #[error(
        "operation {id} waits for {ahead} on {target}: operations on one target run one at a \
         time, in submit order"
    )]
    OperationBehind {
        id: OperationId,
        target: ObjectKey,
        ahead: OperationId,
    },
    /// An assignment of an operation whose deadline has passed (`wait::wait_ended`): it is
    /// never assigned; the deadline sweep fails it (or, if it runs, aborts it).
    #[error(
        "operation {id} cannot be assigned: its deadline passed at {deadline_at_ms} ms (now \
         {now_ms} ms); the deadline sweep ends it"
    )]
    OperationDeadlinePassed {
        id: OperationId,
        deadline_at_ms: u64,
        now_ms: u64,
    },
    /// The worker is past its heartbeat, does not handle the verb, or is full.
    #[error("worker {worker} cannot take operation {id}: {reason}")]
    WorkerUnfit {
        worker: String,
        id: OperationId,
        reason: String,
    },
    /// A report whose (worker, attempt, epoch) is not the operation's current assignment: the
    /// worker lost it (presumed dead, or the operation ended) and must stop.
    #[error(
        "operation {id}: the report of {worker} for attempt {attempt}, epoch {epoch} is stale: \
         {reason}"
    )]
    StaleAssignment {
        id: OperationId,
        worker: String,
        attempt: u32,
        epoch: u64,
        reason: String,
    },
    #[error("user {name} not found")]
    UserNotFound { name: String },
    #[error("user {name} already exists")]
    UserExists { name: String },
    /// A change to users or auth that its rules refuse (e.g. it would leave no admin).
    #[error("{reason}")]
    AuthState { reason: String },
    /// A `Command::Guarded` authorized before users or roles last changed.
    #[error(
        "users or roles changed while this request was in flight (authorized at auth revision \
         {authorized_at}, now {now}); it was not applied: send it again"
    )]
    AuthChanged { authorized_at: u64, now: u64 },
    /// A command that may grow the state while a NOSPACE alarm is raised.
    #[error(
        "the cluster is out of space (alarm {alarm}): only reads, deletes, releases, heartbeats \
         and reports are accepted until an operator frees space (delete objects, then \
         `steward compact`) and runs `steward alarm disarm`"
    )]
    NoSpace { alarm: Alarm },
}

/// What a change did to one object, for watchers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One object change. `revision` equals the object's resourceVersion (for `Deleted`, the
/// deletion revision); events of one command come out in revision order.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub event_type: EventType,
    pub revision: u64,
    /// Shared so that fanning one event out to many watchers does not copy the object.
    pub object: Arc<Resource>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposal_display_names_verb_key_and_time() {
        let obj = Resource::new("v1", "Director", "default", "x");
        let p = Proposal {
            time_ms: 1234,
            command: Command::Create {
                object: obj.clone(),
                fence: None,
            },
        };
        assert_eq!(p.to_string(), "create Director/default/x @1234");
        let txn = Command::Txn {
            ops: vec![
                TxnOp::UpdateStatus {
                    object: obj,
                    expected_revision: None,
                },
                TxnOp::Delete {
                    key: ObjectKey::new("Lock", "ns", "l"),
                    expected_revision: Some(3),
                },
            ],
            fence: Some(Fence {
                lock: "deploy/x".into(),
                token: 7,
            }),
        };
        assert_eq!(
            txn.to_string(),
            "txn [update-status Director/default/x, delete Lock/ns/l] fenced by deploy/x:7"
        );
        assert_eq!(
            Command::RetireNode { node_id: 7 }.to_string(),
            "retire-node 7"
        );
    }

    #[test]
    fn rejection_messages() {
        let key = ObjectKey::new("Lock", "default", "l");
        let nested = Rejection::TxnOpFailed {
            index: 2,
            cause: Box::new(Rejection::Conflict {
                key,
                expected: 4,
                actual: 9,
            }),
        };
        assert_eq!(
            nested.to_string(),
            "txn op 2: conflict on Lock/default/l: expected resourceVersion 4, found 9"
        );
        assert_eq!(
            Rejection::NodeRetired { node_id: 3 }.to_string(),
            "node id 3 was removed from the cluster and cannot be reused"
        );
    }

    #[test]
    fn proposal_and_response_round_trip_through_json() {
        let mut obj = Resource::new("v1", "Director", "default", "x");
        obj.metadata.resource_version = 5;
        let p = Proposal {
            time_ms: 9,
            command: Command::Update {
                object: obj.clone(),
                expected_revision: Some(5),
                fence: None,
            },
        };
        let back: Proposal =
            serde_json::from_str(&serde_json::to_string(&p).expect("ser")).expect("de");
        match back.command {
            Command::Update {
                object,
                expected_revision,
                fence: None,
            } => assert_eq!((object, expected_revision), (obj.clone(), Some(5))),
            other => panic!("{other:?}"),
        }
        for r in [
            Response::Object {
                object: obj,
                revision: 5,
            },
            Response::Done { revision: 1 },
            Response::Rejected(Rejection::TxnOpFailed {
                index: 0,
                cause: Box::new(Rejection::NotFound {
                    key: ObjectKey::new("A", "b", "c"),
                }),
            }),
        ] {
            let text = serde_json::to_string(&r).expect("ser");
            assert_eq!(serde_json::from_str::<Response>(&text).expect("de"), r);
        }
    }
}
