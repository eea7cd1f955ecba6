//! `Rejection`: the domain's "no". An answer, not a failure: replicated like any other reply,
//! it leaves the state as it was, and each message names the field and the rule (the server's
//! error table turns each into its gRPC code and reason).

use serde::{Deserialize, Serialize};

use crate::alarms::Alarm;
use crate::locks::LockMode;
use crate::objects::resource::ObjectKey;
use crate::operations::{OpState, OperationId};

/// Why a command was refused. These are answers, not failures: they are replicated like any
/// other response, and each message names the field and the rule.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, thiserror::Error)]
pub enum Rejection {
    /// A refusal of etcd's keyspace API, in etcd's words (`kv::KvError`).
    #[error("{0}")]
    Kv(crate::kv::KvError),
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
    /// `remaining_ms` is what is left of it at the entry's cluster time (`until_ms` is a cluster
    /// time, not a wall-clock one): the retry delay the client is given.
    #[error(
        "lock {name} is in lock-delay until {until_ms} ms (a WRITE holder expired without \
         releasing it); pass wait_ms > 0 to queue"
    )]
    LockDelayed {
        name: String,
        until_ms: u64,
        #[serde(default)]
        remaining_ms: u64,
    },
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
    /// An entry whose time was not measured by the leader of its term (its proposer led an
    /// older term): applied, its time could set a deadline early or expire something early.
    #[error(
        "the entry of term {term} carries a time measured in another term; it was not applied: \
         send it again"
    )]
    NotStamped { term: u64 },
    /// A command that may grow the state while a NOSPACE alarm is raised.
    #[error(
        "the cluster is out of space (alarm {alarm}): only reads, deletes, releases, heartbeats \
         and reports are accepted until an operator frees space (delete objects, then \
         `steward compact`) and runs `steward alarm disarm`"
    )]
    NoSpace { alarm: Alarm },
}
